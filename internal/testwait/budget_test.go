package testwait

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxSleeps is how many lines of the module's tests may sleep (the standard library's
// Sleep of package time): each a
// deliberate perturbation or real time on a server's clock, with a comment saying so.
// Polling goes through this package; synchronisation through gates, hooks or channels.
const maxSleeps = 12

// TestSleepBudget counts the lines of the module's _test.go files that name that Sleep
// (what grep -c over them counts) and fails above maxSleeps, listing them.
func TestSleepBudget(t *testing.T) {
	root := filepath.Join("..", "..")
	needle := "time." + "Sleep" // spelled apart, so this file does not count itself
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if strings.Contains(sc.Text(), needle) {
				found = append(found, filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))+":"+itoa(n))
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > maxSleeps {
		t.Fatalf("%d test lines call %s, at most %d may (poll with testwait, synchronise with gates or channels):\n%s",
			len(found), needle, maxSleeps, strings.Join(found, "\n"))
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}
