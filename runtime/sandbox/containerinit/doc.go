// Package containerinit makes a program that imports it a container's init
// as early as Go allows: when libcontainer re-executes the binary as
// `PROGRAM init`, this package's init hands the process to libcontainer,
// which sets the container up and execs its process, so the process never
// returns to the program.
//
// Go initializes a package once everything it imports is initialized,
// choosing among the ready ones by import path. This package imports only
// libcontainer (and what every container init needs linked in), so it is
// ready as soon as libcontainer is, and the container's init does not pay
// for the initialization of packages it never uses (the Prometheus
// client's default registry, the CLI, the policy parsers, ...), which runs
// before a main package's init.
package containerinit
