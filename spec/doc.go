// Package spec turns a skill policy into a hardened OCI runtime spec and a
// bundle on disk (config.json plus a small rootfs skeleton).
//
// It is pure: it reads the host's system directories to lay out the root and
// resolve allowed executables, but it never mounts, never needs root and never
// starts anything. Generate builds the spec as a hardened default followed by
// small ordered steps, each widening exactly what the policy grants; Validate
// then checks the finished spec so generator bugs are caught as well as bad
// policies. The runtime package is the one that runs the result.
package spec
