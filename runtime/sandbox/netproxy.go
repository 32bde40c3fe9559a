package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/egress"
	"github.com/warden-sandbox/warden/spec"
)

// EgressHostsEnv names an /etc/hosts style file whose names the egress
// proxy resolves from the file instead of DNS (the address checks still
// apply). It is read when a session's proxy starts.
const EgressHostsEnv = "WARDEN_EGRESS_HOSTS"

// startEgress serves a session's network.allow list: a listener on
// spec.EgressProxyAddr inside the sandbox's network namespace (under
// gVisor, the agent's, relayed: agentEgress), answered by a proxy in this
// process, which dials from the host. It must run before
// any sandboxed code does (at create, or when a pooled sandbox is claimed,
// or when a daemon re-adopts a session), else the sandbox could take the
// port. Without a network.allow list there is nothing to serve: the
// sandbox has loopback only.
func (rt *Runtime) startEgress(s *Session) error {
	if s.egress != nil || len(s.policy.Network.Allow) == 0 {
		return nil
	}
	var allow []policies.HostPattern
	for _, a := range s.policy.Network.Allow {
		h, err := policies.ParseHostPattern(a)
		if err != nil {
			return fmt.Errorf("network.allow: %w", err)
		}
		allow = append(allow, h)
	}
	hosts, err := egressHosts()
	if err != nil {
		return err
	}
	var ln net.Listener
	if _, gvisor := s.container.(*gvisorContainer); gvisor {
		ln, err = agentEgress(s.socketPath())
	} else {
		var pid int
		if pid, _, err = s.container.init(); err != nil {
			return fmt.Errorf("session %s: egress: %w", s.ID, err)
		}
		ln, err = listenInNetns(pid, spec.EgressProxyAddr)
	}
	if err != nil {
		return fmt.Errorf("session %s: egress proxy listener in the sandbox: %w", s.ID, err)
	}
	audit := rt.auditSink()
	p := egress.New(egress.Config{
		Policy: s.PolicyName,
		Allow:  allow,
		Hosts:  hosts,
		Audit: func(r egress.Record) {
			audit.Write(netRecord(s, r))
		},
	})
	s.egress = p
	go p.Serve(ln)
	return nil
}

// StopEgress closes the session's listener and every connection through it.
func (s *Session) StopEgress() {
	if s.egress != nil {
		s.egress.Close()
		s.egress = nil
	}
}

// listenInNetns makes a TCP listener inside the network namespace of pid.
// The thread that enters the namespace is its own (OnOwnThread). The listener stays in that namespace;
// accepting and every upstream dial happen on the host's threads.
func listenInNetns(pid int, addr string) (net.Listener, error) {
	var ln net.Listener
	err := OnOwnThread(func() error {
		target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(target)
		var here, there unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &here); err != nil {
			return err
		}
		if err := unix.Fstat(target, &there); err != nil {
			return err
		}
		if here.Ino == there.Ino && here.Dev == there.Dev {
			// A listener here would be on the host's loopback.
			return errors.New("the sandbox shares this process's network namespace")
		}
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	return ln, err
}

// egressHosts reads the file EgressHostsEnv names, if any.
func egressHosts() (map[string][]netip.Addr, error) {
	path := os.Getenv(EgressHostsEnv)
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w; fix or unset %s", EgressHostsEnv, err, EgressHostsEnv)
	}
	defer f.Close()
	hosts, err := egress.ParseHosts(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", EgressHostsEnv, path, err)
	}
	return hosts, nil
}

func netRecord(s *Session, r egress.Record) AuditRecord {
	rec := AuditRecord{Event: "net.deny", Session: s.ID, Policy: s.PolicyName, PolicyHash: s.PolicyHash,
		Proto: r.Proto, Host: r.Host, Port: r.Port, Addr: r.Addr, Rule: r.Rule,
		BytesIn: r.BytesIn, BytesOut: r.BytesOut, Reason: r.Reason, Count: r.Suppressed, Hosts: r.Hosts,
		DurationMs: float64(r.Duration.Microseconds()) / 1000}
	switch {
	case r.Allowed:
		rec.Event = "net.allow"
	case r.Suppressed > 0:
		rec.Event = "net.suppressed"
	}
	if rec.Event == "net.deny" || rec.Reason != "" {
		logrus.Debugf("session %s: egress %s %s:%d: %s", s.ID, rec.Event, r.Host, r.Port, r.Reason)
	}
	return rec
}
