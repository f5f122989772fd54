package oci

import (
	"strings"
	"testing"
)

// TestValidHostname: the one hostname rule, which WithHostname and the
// sandbox share, and the DNS-name rule of /etc/hosts and search domains,
// which differs from it (underscores, 253 bytes).
func TestValidHostname(t *testing.T) {
	for s, want := range map[string]bool{
		"a": true, "web-1": true, "db.internal": true, "0abc": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, ".a": false, "a_b": false, "a b": false, "a/b": false, "é": false, strings.Repeat("a", 64): false,
	} {
		if got := ValidHostname(s); got != want {
			t.Errorf("ValidHostname(%q) = %v, want %v", s, got, want)
		}
		if _, err := New(WithHostname(s)); (err == nil) != want {
			t.Errorf("WithHostname(%q): %v, want taken %v", s, err, want)
		}
	}
	if _, err := ParseHostEntry("my_db:10.0.0.2"); err != nil {
		t.Errorf("an /etc/hosts name with '_' (a DNS name, not a hostname): %v", err)
	}
}
