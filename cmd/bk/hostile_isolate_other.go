//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// isolation is bk hostile --isolate's placement of the processes; only Linux has it here.
type isolation struct{ bookieCPU, attackerCPU int }

var errOneCPU = errors.New("--isolate: pinning processes to CPUs is implemented for Linux only")

func isolate() (*isolation, error)                   { return nil, errOneCPU }
func (iso *isolation) restore()                      {}
func (iso *isolation) startAttacker(*exec.Cmd) error { return errOneCPU }
func cpusAllowed(string) (string, error)             { return "", errOneCPU }
