package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bookie-go/bookie/bookie"
)

// loadBookieConfig reads the bookie config file path into cfg, as
// cfg.LoadConfigFile does; a JSON error says where in the file it is.
func loadBookieConfig(cfg *bookie.Config, path string) error {
	err := cfg.LoadConfigFile(path)
	if err == nil {
		return nil
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return err // not readable: LoadConfigFile said so
	}
	return jsonFileError("config", path, data, err)
}

// jsonFileError returns the error err of decoding data, the JSON file path,
// as "what path:LINE:COLUMN: problem" (lines and columns from 1, columns in
// bytes): the place of a syntax error, of a value of the wrong type, of an
// unknown key, or the end of a file cut short. An err that is not a JSON
// error is returned as it is.
func jsonFileError(what, path string, data []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var off int64
	var msg string
	switch {
	case errors.As(err, &syntax):
		off, msg = syntax.Offset-1, syntax.Error() // Offset is past the bad byte
	case errors.As(err, &typ):
		// Offset is relative to the value when a type's own UnmarshalJSON
		// failed (bookie.Duration): find the key instead.
		key, _, _ := strings.Cut(typ.Field, ".")
		if off = keyOffset(data, key); off < 0 {
			off = typ.Offset - 1
		}
		msg = fmt.Sprintf("%s: a JSON %s where %s is wanted", typ.Field, typ.Value, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF):
		off, msg = int64(len(bytes.TrimRight(data, " \t\r\n"))), "the file ends before its JSON does"
	default:
		key, ok := unknownField(err)
		if !ok {
			return err
		}
		if off = keyOffset(data, key); off < 0 {
			return err
		}
		msg = fmt.Sprintf("unknown key %q", key)
	}
	off = max(0, min(off, int64(len(data))))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(data[:off], '\n'))
	return fmt.Errorf("%s %s:%d:%d: %s", what, path, line, col, msg)
}

// unknownField returns the key of encoding/json's "unknown field" error.
func unknownField(err error) (string, bool) {
	_, quoted, ok := strings.Cut(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	var key string
	if json.Unmarshal([]byte(quoted), &key) != nil {
		return "", false
	}
	return key, true
}

// keyOffset returns the byte offset of the first key named key in the
// top-level object of data, -1 if there is none.
func keyOffset(data []byte, key string) int64 {
	dec := json.NewDecoder(bytes.NewReader(data))
	depth := 0
	expectKey := false
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return -1
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				depth++
			} else {
				depth--
			}
			expectKey = depth == 1 && t == '{'
			if depth == 1 && (t == '}' || t == ']') {
				expectKey = true // a nested value ended: a key comes next
			}
			continue
		case string:
			if depth == 1 && expectKey {
				if t == key {
					// before is where the previous token ended: skip the
					// separators to the key's opening quote.
					return before + int64(bytes.IndexByte(data[before:], '"'))
				}
				expectKey = false
				continue
			}
		}
		if depth == 1 {
			expectKey = true // a scalar value ended: a key comes next
		}
	}
}
