// Package policies owns warden's skill policies.
//
// It holds the TOML schema and its strict loading (every error names file,
// line and key), import of clawhive SKILL.md front matter, the longest-match
// file-system rules,
// composition (Merge for skills active together, Intersect for ceilings),
// canonical encoding and hashing, variable expansion, network host
// patterns for the egress proxy, and in-process checks (Checker) for agent
// tools that never enter a sandbox. It is pure Go and needs no privileges;
// spec turns a policy into an OCI bundle, runtime enforces it.
//
// The example policies in this folder (web-fetch.toml, data-processor.toml,
// inspector.toml, offline-builder.toml) are loaded by the tests.
// docs/policy.md documents the schema.
package policies
