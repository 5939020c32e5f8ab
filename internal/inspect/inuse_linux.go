//go:build linux

package inspect

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OpenBy returns the ids of other processes that hold a file under one of
// dirs open, found through /proc/*/fd (only processes this user may look
// at). A bookie holds its journal segments, entry logs and index files open
// while it runs, so a non-empty answer means the directories are probably
// in use.
func OpenBy(dirs ...string) []int {
	var prefixes []string
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil {
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				abs = real
			}
			prefixes = append(prefixes, abs+string(filepath.Separator))
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			continue
		}
	fds:
		for _, fd := range fds {
			target, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name())
			if err != nil {
				continue
			}
			for _, pre := range prefixes {
				if strings.HasPrefix(target, pre) {
					pids = append(pids, pid)
					break fds
				}
			}
		}
	}
	return pids
}
