package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v2"

	"github.com/warden-sandbox/warden/policies"
	"github.com/warden-sandbox/warden/runtime/oci"
)

var updateCommand = &cli.Command{
	Name:      "update",
	Usage:     "OCI: change a container's resources (never above its policy's limits)",
	ArgsUsage: "CONTAINER-ID",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "resources", Aliases: []string{"r"}, Usage: "read the resources (runtime-spec linux.resources JSON) from `FILE`, - for stdin"},
		&cli.Int64Flag{Name: "memory", Usage: "memory limit in `BYTES`"},
		&cli.Int64Flag{Name: "pids-limit", Usage: "pids limit `N`"},
		&cli.Int64Flag{Name: "cpu-quota", Usage: "cpu quota in `MICROSECONDS` per period"},
		&cli.Uint64Flag{Name: "cpu-period", Usage: "cpu period in `MICROSECONDS`"},
	},
	Action: func(cliContext *cli.Context) error {
		id, err := containerArg(cliContext, 1, 1, "a container id")
		if err != nil {
			return err
		}
		var r specs.LinuxResources
		if in := cliContext.String("resources"); in != "" {
			var src io.Reader = io.LimitReader(os.Stdin, policies.MaxSpecFile)
			if in != "-" {
				data, err := policies.ReadFile(in, "--resources file", policies.MaxSpecFile)
				if err != nil {
					return err
				}
				src = bytes.NewReader(data)
			}
			if err := json.NewDecoder(src).Decode(&r); err != nil {
				return fmt.Errorf("--resources: not runtime-spec linux.resources JSON: %w", err)
			}
		}
		if cliContext.IsSet("memory") {
			v := cliContext.Int64("memory")
			r.Memory = &specs.LinuxMemory{Limit: &v}
		}
		if cliContext.IsSet("pids-limit") {
			v := cliContext.Int64("pids-limit")
			r.Pids = &specs.LinuxPids{Limit: &v}
		}
		if cliContext.IsSet("cpu-quota") || cliContext.IsSet("cpu-period") {
			if r.CPU == nil {
				r.CPU = &specs.LinuxCPU{}
			}
			if cliContext.IsSet("cpu-quota") {
				v := cliContext.Int64("cpu-quota")
				r.CPU.Quota = &v
			}
			if cliContext.IsSet("cpu-period") {
				v := cliContext.Uint64("cpu-period")
				r.CPU.Period = &v
			}
		}
		o, err := ociRuntime(cliContext)
		if err != nil {
			return err
		}
		return o.Update(id, &r)
	},
}

var featuresCommand = &cli.Command{
	Name:  "features",
	Usage: "OCI: print what this runtime supports, as runtime-spec features JSON",
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		enc := json.NewEncoder(cliContext.App.Writer)
		enc.SetIndent("", "    ")
		return enc.Encode(oci.Features(version, commit))
	},
}

var specCommand = &cli.Command{
	Name:  "spec",
	Usage: "OCI: write a default config.json into the bundle directory",
	Flags: []cli.Flag{&cli.StringFlag{Name: "bundle", Aliases: []string{"b"}, Usage: "the bundle `DIR`", Value: "."}},
	Action: func(cliContext *cli.Context) error {
		if err := checkArgs(cliContext, 0, 0, "no arguments"); err != nil {
			return err
		}
		return oci.WriteExampleSpec(cliContext.String("bundle"))
	},
}
