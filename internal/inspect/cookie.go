package inspect

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/bookie-go/bookie/internal/datadir"
	"github.com/bookie-go/bookie/vfs"
)

// CookieReport is the cookies of a bookie's data directories.
type CookieReport struct {
	Cookies []CookieFile `json:"cookies"`
	// Match says every directory holds the same valid cookie: what a
	// bookie needs to start without --allow-unknown-state.
	Match bool `json:"match"`
}

// CookieFile is one directory's cookie.
type CookieFile struct {
	File     string `json:"file"`
	Present  bool   `json:"present"`
	Instance string `json:"instance,omitempty"`
	Bookie   string `json:"bookie,omitempty"`
	Limbo    bool   `json:"limbo"`
	Error    string `json:"error,omitempty"`
}

// Cookies reads the cookie of each directory of dirs.
func Cookies(fs vfs.FS, dirs Dirs) *CookieReport {
	rep := &CookieReport{Match: true}
	var first *datadir.Cookie
	for _, dir := range []string{dirs.Journal, dirs.Ledgers} {
		cf := CookieFile{File: filepath.Join(dir, datadir.CookieFile)}
		data, err := vfs.ReadFile(fs, cf.File)
		switch {
		case errors.Is(err, os.ErrNotExist):
			cf.Error = "missing"
			rep.Match = false
		case err != nil:
			cf.Error = err.Error()
			rep.Match = false
		default:
			cf.Present = true
			c, err := datadir.ParseCookie(data)
			if err != nil {
				cf.Error = err.Error()
				rep.Match = false
				break
			}
			cf.Instance, cf.Bookie, cf.Limbo = c.Instance, c.Bookie, c.Limbo
			if first == nil {
				first = &c
			} else if *first != c {
				rep.Match = false
			}
		}
		rep.Cookies = append(rep.Cookies, cf)
	}
	return rep
}
