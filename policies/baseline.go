package policies

import _ "embed"

// BaselineContainer is the shipped baseline-container.toml: the policy
// `warden install` registers for containers that select none, unless the
// operator names a policy or asks for unconfined containers.
//
//go:embed baseline-container.toml
var BaselineContainer []byte
