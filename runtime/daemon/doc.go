// Package daemon serves one state root: it owns the root's sessions and
// warm pools, answers the CLI on a 0600 unix socket (request and reply
// types, the client), reads the root's configuration file and writes its
// audit log.
package daemon
