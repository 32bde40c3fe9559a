package spec

import (
	"strings"

	"github.com/warden-sandbox/warden/policies"
)

// EgressProxyAddr is where a sandbox with a network.allow list finds
// warden's egress proxy: a listener in the sandbox's own network namespace,
// served from the host. The port is fixed so bundles stay reproducible.
const EgressProxyAddr = "127.0.0.1:3128"

// proxyEnv points every common client at the egress proxy. ALL_PROXY is
// http:// too: every client that reads it speaks HTTP proxy, not all speak
// SOCKS (the same port answers SOCKS5 for those asked to use it).
// NO_PROXY keeps the sandbox's own loopback direct.
func proxyEnv(p *policies.Policy) map[string]string {
	if len(p.Network.Allow) == 0 {
		return nil
	}
	url := "http://" + EgressProxyAddr
	env := map[string]string{}
	for _, name := range []string{"http_proxy", "https_proxy", "all_proxy"} {
		env[name] = url
	}
	env["no_proxy"] = "localhost,127.0.0.1,::1"
	for name, value := range env {
		env[strings.ToUpper(name)] = value
	}
	return env
}

// proxyEnvNames are the variables proxyEnv may set.
var proxyEnvNames = []string{"http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}
