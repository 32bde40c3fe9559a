package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/sandbox"
	"github.com/warden-sandbox/warden/spec"
)

var policyExplainCommand = &cli.Command{
	Name:            "explain",
	Usage:           "say in plain words what a sandbox under a policy can read, write, run and reach",
	ArgsUsage:       "FILE",
	Flags:           varFlags,
	SkipFlagParsing: true, // see positional
	Action: func(cliContext *cli.Context) error {
		files, err := positional(cliContext, 1, -1, "one or more policy files (merged)")
		if err != nil {
			return err
		}
		// The explanation is read off the spec warden would really run, so
		// it cannot drift from what the sandbox gets.
		o, err := sandboxOptions(cliContext, files, "/bundle")
		if err != nil {
			return err
		}
		o.Args = nil
		// As a session has it: the agent, and the stubs of [commands].
		o.Agent = explainAgent
		b, err := spec.Generate(o)
		if err != nil {
			return err
		}
		explain(cliContext.App.Writer, o.Policy, b)
		printWarnings(cliContext, b)
		return nil
	},
}

func explain(w io.Writer, p *policies.Policy, b *spec.Bundle) {
	fmt.Fprintf(w, "policy %s (%s)\n", p.Name, p.Hash())
	if p.Description != "" {
		fmt.Fprintf(w, "  %s\n", p.Description)
	}
	fmt.Fprintln(w, "\nisolation:")
	if p.Sandbox.Engine == policies.EngineGVisor {
		fmt.Fprintln(w, "  engine gvisor: gVisor's application kernel (runsc) stands between the sandbox and the host's kernel")
		fmt.Fprintln(w, "  differences: no [commands] rules yet; warm pools as on engine container (a claim binds the folders inside gVisor's kernel); a memory limit exceeded ends the whole sandbox;")
		fmt.Fprintln(w, "  exec.allow is held by the file view (programs not allowed are absent) and warden's own binary, the agent, stays runnable")
	} else {
		fmt.Fprintln(w, "  engine container: namespaces, seccomp, Landlock and cgroups on the host's kernel (engine = \"gvisor\" puts gVisor in between)")
	}
	fmt.Fprintln(w, "\nfiles (everything else on the host is invisible):")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, m := range b.Spec.Mounts {
		if m.Source == explainAgent {
			continue // warden's own: the agent, the stubs (under commands)
		}
		if line := describeMount(m, b); line != "" {
			fmt.Fprintf(tw, "  %s\n", line)
		}
	}
	for _, p := range b.Absent {
		fmt.Fprintf(tw, "  absent\t%s\t(denied; not on the host, and nothing in the sandbox can create it)\n", p)
	}
	fmt.Fprintf(tw, "  generated\t/etc\tpasswd, group, hosts, resolv.conf; TLS roots and loader cache from the host\n")
	tw.Flush()

	fmt.Fprintln(w, "\nrun:")
	if p.Exec.All {
		fmt.Fprintln(w, "  every program in the host's system directories")
	} else if allowed := b.Spec.Annotations[spec.AnnotationExecAllow]; allowed == "" {
		fmt.Fprintln(w, "  nothing")
	} else {
		fmt.Fprintf(w, "  only %s\n", strings.ReplaceAll(allowed, ":", " "))
		fmt.Fprintln(w, "  (sh is always there to run command strings such as sh -c \"curl … | jq …\"; it can start only the programs listed;")
		fmt.Fprintln(w, "  an allowed interpreter such as sh or python3 runs any script it is given)")
	}

	if p.Exec.Workspace {
		fmt.Fprintf(w, "  and programs the sandbox writes into %s (exec.workspace): code it builds or downloads runs,\n", strings.Join(spec.ExecWritablePaths, " and "))
		fmt.Fprintln(w, "  still inside every other wall (no setuid, seccomp, no capabilities, the fs and network rules)")
	}

	if c := p.Commands; !c.Empty() {
		fmt.Fprintln(w, "\ncommands (the most specific pattern decides; a command no rule matches runs):")
		for _, l := range []struct {
			what  string
			rules []string
		}{{"deny ", c.Deny}, {"ask  ", c.Ask}, {"allow", c.Allow}} {
			for _, r := range l.rules {
				fmt.Fprintf(w, "  %s  %s\n", l.what, r)
			}
		}
		fmt.Fprintf(w, "  an ask waits for `warden approvals approve|deny ID`; unanswered within %s it is denied (exit 126)\n", c.AskTimeout())
		progs, _ := spec.CommandPrograms(b.Spec)
		for _, pr := range progs {
			fmt.Fprintf(w, "  %s: held however it is started; warden's stub stands at %s\n", pr.File, strings.Join(pr.Stubs, " "))
			if len(pr.Script) > 0 {
				fmt.Fprintf(w, "    a script: an allowed call runs %s ARGS (its text, readable, never executable)\n", strings.Join(pr.Script, " "))
			}
		}
	}

	fmt.Fprintln(w, "\nnetwork:")
	if len(p.Network.Allow) == 0 {
		fmt.Fprintln(w, "  none: loopback only")
	} else {
		fmt.Fprintf(w, "  only %s, through warden's egress proxy; nothing else\n", strings.Join(p.Network.Allow, " "))
	}

	fmt.Fprintln(w, "\nenvironment:")
	fmt.Fprintf(w, "  %s\n", strings.Join(b.Spec.Process.Env, " "))
	if len(p.Env.Allow) > 0 {
		fmt.Fprintf(w, "  passed through from the caller when set: %s\n", strings.Join(p.Env.Allow, " "))
	}

	l := p.Limits
	fmt.Fprintln(w, "\nlimits:")
	fmt.Fprintf(w, "  memory %s, %d processes/threads, %g cpu, %s per command, session idle expiry %s\n",
		policies.FormatSize(l.Memory), l.Pids, l.CPU, l.Timeout, l.Idle)

	fmt.Fprintln(w, "\nidentity:")
	u := b.Spec.Linux.UIDMappings[0]
	fmt.Fprintf(w, "  root inside is host uid %d (unprivileged) in a bundle; a session's is a host uid of its own (%s), which owns its user namespace\n", u.HostID, sandbox.SandboxUIDs)
	fmt.Fprintln(w, "  no capabilities, no_new_privs, seccomp allow-list")
}

// explainAgent stands for warden's binary in the spec explain reads.
const explainAgent = "/usr/local/bin/warden"

func describeMount(m specs.Mount, b *spec.Bundle) string {
	if m.Type == "bind" && isExecutable(m.Destination, b) {
		return fmt.Sprintf("run\t%s\t<- %s", m.Destination, m.Source)
	}
	exec := "exec"
	if slices.Contains(m.Options, "noexec") {
		exec = "noexec"
	}
	switch {
	case m.Destination == "/tmp":
		return fmt.Sprintf("scratch\t/tmp\tmemory-backed, %s, noexec, private", sizeOption(m.Options))
	case m.Type != "bind":
		return ""
	case strings.HasPrefix(m.Destination, "/etc/"):
		return ""
	case strings.Contains(m.Source, "/masks/"):
		return fmt.Sprintf("hidden\t%s\t", m.Destination)
	case slices.Contains(m.Options, "rw"):
		return fmt.Sprintf("read-write\t%s\t<- %s (%s; new files owned by its owner)", m.Destination, m.Source, exec)
	case m.Source == m.Destination:
		return fmt.Sprintf("read-only\t%s\t(host system files, %s)", m.Destination, exec)
	default:
		return fmt.Sprintf("read-only\t%s\t<- %s (%s)", m.Destination, m.Source, exec)
	}
}

func isExecutable(p string, b *spec.Bundle) bool {
	return slices.Contains(strings.Split(b.Spec.Annotations[spec.AnnotationExecAllow], ":"), p)
}

func sizeOption(opts []string) string {
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "size="); ok {
			var k int64
			fmt.Sscanf(v, "%dk", &k)
			return policies.FormatSize(k * 1024)
		}
	}
	return "unlimited"
}
