package oci

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/runtime/sandbox"
)

// isolateNetwork leaves only loopback in the network namespace of the
// process pid: every other interface is deleted (a veth takes its host
// peer with it) and loopback is brought up. A device that cannot be
// deleted (a physical one moved in) is an error: the container is not
// started.
func isolateNetwork(pid int) error {
	// The netlink socket is made inside the container's namespace by a
	// thread that enters it; that thread is never reused (a thread
	// returned to the pool could still be inside).
	return sandbox.OnOwnThread(func() error { return isolateNetworkLocked(pid) })
}

func isolateNetworkLocked(pid int) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of %d: %w", pid, err)
	}
	defer ns.Close()
	// Routing only: without families the handle opens a socket for each
	// one netlink has (route, xfrm, netfilter), entering the namespace
	// and leaving it again for every one.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in the container: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("container interfaces: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			if err := h.LinkSetUp(l); err != nil {
				return fmt.Errorf("loopback up: %w", err)
			}
			continue
		}
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("the policy allows no network, but interface %s cannot be removed from the container: %w", l.Attrs().Name, err)
		}
	}
	return nil
}
