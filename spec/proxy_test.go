package spec

import (
	"slices"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/policies"
)

func TestProxyEnvironment(t *testing.T) {
	// A policy file may not name them (policies refuses it); one built in
	// Go may, and warden's values still win.
	with := mustParse(t, `name = "t"
[network]
allow = ["api.example.com:443"]
`)
	with.Env.Allow = []string{"HTTPS_PROXY", "http_proxy"}
	with.Env.Set = map[string]string{"ALL_PROXY": "socks5://evil.example:1080"}
	env := SandboxEnv(with, policies.Vars{}, []string{"HTTPS_PROXY=http://corp-proxy:8080", "http_proxy=http://corp-proxy:8080"})
	for _, want := range []string{
		"HTTP_PROXY=http://127.0.0.1:3128", "http_proxy=http://127.0.0.1:3128",
		"HTTPS_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
		"ALL_PROXY=http://127.0.0.1:3128", "all_proxy=http://127.0.0.1:3128",
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %q", want, env)
		}
	}
	b, _, _ := generate(t, with)
	if !slices.Contains(b.Spec.Process.Env, "HTTPS_PROXY=http://127.0.0.1:3128") {
		t.Errorf("bundle env lacks the proxy: %q", b.Spec.Process.Env)
	}
	without := mustParse(t, `name = "t"`)
	for _, kv := range SandboxEnv(without, policies.Vars{}, []string{"HTTP_PROXY=http://corp-proxy:8080"}) {
		if strings.Contains(strings.ToLower(kv), "proxy") {
			t.Errorf("no network.allow, yet %s", kv)
		}
	}
	if err := checkEnv(b.Spec, without); err == nil {
		t.Error("checkEnv accepts proxy variables for a policy without network.allow")
	}
}
