package dockercompat

import (
	"errors"
	"testing"

	"github.com/slopbox/slopbox/backend"
)

func TestParsePort(t *testing.T) {
	for in, want := range map[string]backend.PortMapping{
		"8080:80":               {HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		"80":                    {ContainerPort: 80, Protocol: "tcp"},
		"127.0.0.1:8080:80":     {HostIP: "127.0.0.1", HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		"127.0.0.1::80/udp":     {HostIP: "127.0.0.1", ContainerPort: 80, Protocol: "udp"},
		"[::1]:8080:80":         {HostIP: "::1", HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		"5353:53/udp":           {HostPort: 5353, ContainerPort: 53, Protocol: "udp"},
		"0.0.0.0:9000:9000/tcp": {HostIP: "0.0.0.0", HostPort: 9000, ContainerPort: 9000, Protocol: "tcp"},
	} {
		got, err := ParsePort(in)
		if err != nil || got != want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "8080:0", "70000:80", "8080:80/sctp", "8000-8010:80-90", "1.2.3:80:80", "[::1:80:80", "a:b:c:d", "::1:80:80"} {
		if _, err := ParsePort(bad); !errors.Is(err, backend.ErrInvalidValue) {
			t.Errorf("ParsePort(%q): %v, want an invalid-value error", bad, err)
		}
	}
}
