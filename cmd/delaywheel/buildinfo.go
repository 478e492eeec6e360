package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is the gauge delaywheel_build_info{version,revision,goversion},
// always 1, from what the Go toolchain records in the binary
// (debug.ReadBuildInfo): the module version ("(devel)" for a build from a
// checkout), the VCS revision ("-dirty" when the tree had changes;
// "unknown" when none was recorded) and the Go version.
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "(devel)", "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && revision != "unknown" {
			revision += "-dirty"
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "delaywheel_build_info",
		Help:        "Always 1; its labels say which build of delaywheel runs: version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	return g
}
