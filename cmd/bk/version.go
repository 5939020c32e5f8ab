package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/bookie-go/bookie/bookie"
)

func init() {
	register("version", "print the version of bk and the bookie it runs", runVersion)
	// Bookies report this in GET_INFO, their registration and
	// bookie_build_info, unless the build set it (-ldflags -X).
	if bookie.Build == "bookie-go dev" {
		bookie.Build = "bookie-go " + moduleVersion()
	}
}

// version, when set at build time (-ldflags "-X main.version=v1.2.3", as
// the Dockerfile does), is what moduleVersion reports.
var version string

// moduleVersion returns the version this binary was built as: version if
// set, else the module's tag for go install ...@vX.Y.Z, else the VCS
// revision (with
// "+dirty" for uncommitted changes), else "dev".
func moduleVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev[:min(12, len(rev))] + dirty
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ExitOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Parse(args)
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]string{
			"version": moduleVersion(), "build": bookie.Build, "go": runtime.Version(),
			"os": runtime.GOOS, "arch": runtime.GOARCH})
	}
	fmt.Printf("bk %s (%s, %s/%s)\n", moduleVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
