// Package oci is warden's runc-compatible OCI runtime: the verbs Docker,
// containerd and Kubernetes call (create, start, exec, kill, delete, ...),
// a policy's tightening of a container's own config.json, and registering
// warden with those engines.
package oci
