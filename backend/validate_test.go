package backend

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestLimitsValidate(t *testing.T) {
	n := runtime.NumCPU()
	for _, c := range []struct {
		l   Limits
		msg string // "" when valid
	}{
		{Limits{}, ""},
		{Limits{MemoryBytes: 6 << 20, CPUs: 0.01, Pids: 1}, ""},
		{Limits{MemoryBytes: 1 << 40, CPUs: float64(n), Pids: -1}, ""},
		{Limits{MemoryBytes: -1}, "invalid memory limit -1: it must not be negative"},
		{Limits{MemoryBytes: math.MinInt64}, "must not be negative"},
		{Limits{MemoryBytes: 1}, "Minimum memory limit allowed is 6MB"},
		{Limits{MemoryBytes: 6<<20 - 1}, "Minimum memory limit allowed is 6MB"},
		{Limits{CPUs: -1}, "Range of CPUs is from 0.01 to"},
		{Limits{CPUs: 0.009}, "Range of CPUs is from 0.01 to"},
		{Limits{CPUs: float64(n) + 0.5}, "Range of CPUs is from 0.01 to"},
		{Limits{CPUs: 1000}, "as there are only"},
		{Limits{CPUs: math.NaN()}, "invalid CPU limit NaN"},
		{Limits{CPUs: math.Inf(1)}, "invalid CPU limit +Inf"},
	} {
		err := c.l.Validate()
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.l, err)
		case c.msg != "" && (err == nil || !strings.Contains(err.Error(), c.msg) || !errors.Is(err, ErrInvalidLimit)):
			t.Errorf("%+v: %v, want ErrInvalidLimit with %q", c.l, err, c.msg)
		}
	}
}

func TestExecRequestValidate(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, time.Hour, math.MaxInt64} {
		if err := (ExecRequest{Timeout: d}).Validate(); err != nil {
			t.Errorf("timeout %v: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-1, -time.Second, math.MinInt64} {
		err := (ExecRequest{Timeout: d}).Validate()
		if !errors.Is(err, ErrInvalidTimeout) || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("timeout %v: %v, want ErrInvalidTimeout", d, err)
		}
	}
}
