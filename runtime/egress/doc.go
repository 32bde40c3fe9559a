// Package egress is warden's per-session egress proxy: the only way out of a
// sandbox whose policy has a network.allow list. One listener speaks HTTP
// proxy (absolute-form requests), HTTPS CONNECT and SOCKS5 (CONNECT, names
// resolved here). A request is matched on the name the client asked for;
// names are resolved on the host, and every resolved address is checked
// again, so a name cannot lead to loopback, link-local, private or the
// host's own addresses unless a rule names them by address. The proxy dials
// the address it checked and never resolves twice. Every decision is
// reported to an audit callback.
package egress
