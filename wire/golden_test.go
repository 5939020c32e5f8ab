package wire

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/")

// goldenPath returns the golden file of a message case: "add-request/recovery" ->
// testdata/add-request_recovery.frame.
func goldenPath(name string) string {
	return filepath.Join("testdata", strings.ReplaceAll(name, "/", "_")+".frame")
}

// TestGolden pins the exact bytes of every message case: the encoders must produce the
// frames in testdata/, and those frames must decode to the values annotated in them. Run
// with -update to rewrite them after a deliberate format change (there should be none
// within a protocol version).
func TestGolden(t *testing.T) {
	for _, c := range messageCases() {
		t.Run(c.name, func(t *testing.T) {
			m, err := decoders[kind(c.name)](c.frame)
			if err != nil {
				t.Fatal(err)
			}
			want := "# " + c.name + "\n" + annotate(c.frame, m)
			path := goldenPath(c.name)
			if *update {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./wire -run TestGolden -update to create it)", err)
			}
			lines, err := parseAnnotated(string(got))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if frame := frameOf(lines); !bytes.Equal(frame, c.frame) {
				t.Fatalf("%s: the encoder's frame differs from the golden one:\n got %x\nwant %x", path, c.frame, frame)
			}
			if string(got) != want {
				t.Fatalf("%s: annotations differ from the decoded values:\n got:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

// goldenFrames returns the frames of every golden file, for fuzz seeds.
func goldenFrames(tb testing.TB) [][]byte {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.frame"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no golden frames in testdata/: %v", err)
	}
	var frames [][]byte
	for _, p := range paths {
		text, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		lines, err := parseAnnotated(string(text))
		if err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		frames = append(frames, frameOf(lines))
	}
	return frames
}
