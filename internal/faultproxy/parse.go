package faultproxy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// ParseRule parses one rule in the text syntax bk faultproxy takes on its command line and
// in rule files:
//
//	ACTION [dir=req|resp] [op=OP] [ledger=N] [entry=N] [fence] [recovery] [plain]
//	       [status=STATUS] [count=N] [prob=P]
//
// ACTION is pass, drop, delay=DURATION (Go syntax: 50ms), hold, dup or cut. OP and STATUS
// are the names docs/protocol.md uses (READ_LAC, NoSuchEntry), case-insensitive. count
// retires the rule after it has acted on N frames; prob makes it act on each frame it
// matches with probability P. Example: "drop dir=req op=READ_LAC fence ledger=7 count=1".
func ParseRule(s string) (RuleSpec, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return RuleSpec{}, fmt.Errorf("faultproxy: empty rule")
	}
	var spec RuleSpec
	act, arg, hasArg := strings.Cut(fields[0], "=")
	switch strings.ToLower(act) {
	case "pass":
		spec.Action = Pass
	case "drop":
		spec.Action = Drop
	case "delay":
		spec.Action = Delay
		if !hasArg {
			return RuleSpec{}, fmt.Errorf("faultproxy: rule %q: delay needs a duration (delay=50ms)", s)
		}
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return RuleSpec{}, fmt.Errorf("faultproxy: rule %q: bad delay %q", s, arg)
		}
		spec.Delay = d
	case "hold":
		spec.Action = Hold
	case "dup", "duplicate":
		spec.Action = Duplicate
	case "cut":
		spec.Action = Cut
	default:
		return RuleSpec{}, fmt.Errorf("faultproxy: rule %q: unknown action %q", s, act)
	}
	if hasArg && spec.Action != Delay {
		return RuleSpec{}, fmt.Errorf("faultproxy: rule %q: %s takes no argument", s, act)
	}
	m := &spec.Match
	for _, f := range fields[1:] {
		key, val, _ := strings.Cut(f, "=")
		var err error
		switch strings.ToLower(key) {
		case "dir":
			switch strings.ToLower(val) {
			case "req", "request", "to-bookie":
				m.Dir = ToBookie
			case "resp", "response", "to-client":
				m.Dir = ToClient
			case "any", "both":
				m.Dir = 0
			default:
				err = fmt.Errorf("bad direction %q", val)
			}
		case "op":
			m.Op, err = parseOp(val)
		case "ledger":
			m.Ledger, err = strconv.ParseUint(val, 10, 64)
			m.HasLedger = true
		case "entry":
			m.Entry, err = strconv.ParseInt(val, 10, 64)
			m.HasEntry = true
		case "fence":
			m.Fence = true
		case "recovery":
			m.Recovery = true
		case "plain":
			m.NoFlags = true
		case "status":
			m.Status, err = parseStatus(val)
			m.HasStatus = true
		case "count":
			spec.Limit, err = strconv.Atoi(val)
			if err == nil && spec.Limit <= 0 {
				err = fmt.Errorf("count must be positive")
			}
		case "prob":
			spec.Prob, err = strconv.ParseFloat(val, 64)
			if err == nil && (spec.Prob <= 0 || spec.Prob > 1) {
				err = fmt.Errorf("prob must be in (0, 1]")
			}
		default:
			err = fmt.Errorf("unknown field %q", key)
		}
		if err != nil {
			return RuleSpec{}, fmt.Errorf("faultproxy: rule %q: %s: %w", s, f, err)
		}
	}
	return spec, nil
}

// ParseRules reads rules, one per line; blank lines and lines starting with # are skipped.
func ParseRules(r io.Reader) ([]RuleSpec, error) {
	var specs []RuleSpec
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		spec, err := ParseRule(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		specs = append(specs, spec)
	}
	return specs, sc.Err()
}

func parseOp(s string) (wire.Op, error) {
	for op := wire.Op(1); op < 0x80; op++ {
		if op.Known() && strings.EqualFold(op.String(), s) {
			return op, nil
		}
	}
	return 0, fmt.Errorf("unknown operation %q", s)
}

func parseStatus(s string) (wire.Status, error) {
	for st := wire.Status(0); st.Known(); st++ {
		if strings.EqualFold(st.String(), s) {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown status %q", s)
}
