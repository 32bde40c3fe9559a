package sandbox

// execRequest asks the agent to run one command. The first message on a
// connection; stdin, stdout and stderr come with it unless Tty is set.
type execRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	Tty  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
	// Seal, alone, tells a pooled agent its session's folders are bound.
	Seal bool `json:"seal,omitempty"`
	// Binds, with Seal, are the folders a pooled gVisor agent binds
	// (gvisorBinds).
	Binds []string `json:"binds,omitempty"`
	// Rules, alone, opens the command rules' channel (commands.go).
	Rules bool `json:"rules,omitempty"`
	// Egress, alone, opens a gVisor agent's egress channel
	// (egress_gvisor.go).
	Egress bool `json:"egress,omitempty"`
	// KillAll, alone, has a gVisor agent kill every other process of its
	// sandbox (Session.Kill) and answer with a killAllReply.
	KillAll bool `json:"killall,omitempty"`
	// Ready, alone, is answered with an empty execEvent once the agent
	// serves: after it filled its Landlock ruleset (agentReady).
	Ready bool `json:"ready,omitempty"`
	// Run is 1 + the ruled program the rules let argv run: where argv[0]
	// finds that program's stub, the agent runs the program itself.
	Run int `json:"run,omitempty"`
}

// execControl is what a client may wire.Send while the command runs.
type execControl struct {
	Signal int    `json:"signal,omitempty"` // deliver to the command's process group
	Kill   bool   `json:"kill,omitempty"`   // kill the command's whole tree
	Rows   uint16 `json:"rows,omitempty"`   // resize the terminal
	Cols   uint16 `json:"cols,omitempty"`
}

// execEvent is what the agent reports: first Started (with the terminal's
// master side when Tty), then Exited; or Error with the exit code warden
// gives it (126 cannot run, 127 not found or not allowed).
type execEvent struct {
	Started bool   `json:"started,omitempty"`
	Pid     int    `json:"pid,omitempty"`
	Exited  bool   `json:"exited,omitempty"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal,omitempty"`
	Error   string `json:"error,omitempty"`
}
