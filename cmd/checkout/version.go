package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version overrides the version read from the build information, for
// builds that stamp one: go build -ldflags "-X main.version=v1.2.3".
var version string

// versionInfo is what checkout --version and checkout version print: the
// module version Go stamped into the binary (a tag, a pseudo-version from
// the commit, or "(devel)"), the commit when the build recorded it, and the
// toolchain.
func versionInfo() string {
	b := readBuild()
	var out strings.Builder
	fmt.Fprintf(&out, "checkout %s\n", b.Version)
	if b.Commit != "" {
		fmt.Fprintf(&out, "  commit: %s\n", b.Commit)
	}
	fmt.Fprintf(&out, "  go: %s %s\n", b.Go, b.Platform)
	return out.String()
}

// build is what versionInfo prints, and checkout version --json.
type build struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readBuild() build {
	v, commit := version, ""
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		goVersion = bi.GoVersion
		var rev, at string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			commit = rev
			if len(commit) > 12 {
				commit = commit[:12]
			}
			if at != "" {
				commit += " (" + at + ")"
			}
			if dirty {
				commit += ", modified"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return build{Version: v, Commit: commit, Go: goVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of this binary (the same as checkout --version)",
		Example: "  checkout version\n  checkout --version",
		Args:    exactArgs(0, ""),
		RunE:    func(cmd *cobra.Command, args []string) error { return a.printVersion() },
	}
}

// printVersion is what checkout version and checkout --version print:
// versionInfo, or with --json the build as JSON.
func (a *app) printVersion() error {
	if a.json {
		return json.NewEncoder(a.stdout).Encode(readBuild())
	}
	_, err := fmt.Fprint(a.stdout, versionInfo())
	return err
}

// versionOnly is the version alone, for the MCP server's implementation
// info.
func versionOnly() string {
	line, _, _ := strings.Cut(versionInfo(), "\n")
	return strings.TrimPrefix(line, "checkout ")
}
