//go:build !linux

package bookie

// socketHasInput is false where the bookie does not ask the kernel: a
// connection that stops at maxFramesPerTraffic is then always woken.
func socketHasInput(transport) bool { return false }
