package sandbox

import (
	"strings"
	"testing"
)

// TestDNSName: the aliases a network's DNS server can answer.
func TestDNSName(t *testing.T) {
	for s, want := range map[string]bool{
		"web": true, "my_service": true, "db-1.internal": true, "A1": true,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false,
		"": false, ".": false, "a..b": false, "a.": false, "a b": false, "a\r": false,
		"a\x00": false, "a/b": false, "é": false, strings.Repeat("a.", 127) + "a": false,
	} {
		if got := dnsName(s); got != want {
			t.Errorf("dnsName(%q) = %v, want %v", s, got, want)
		}
	}
}
