package backend

import (
	"testing"
)

func TestPortMappingString(t *testing.T) {
	if s := (PortMapping{HostPort: 8080, ContainerPort: 80}).String(); s != "127.0.0.1:8080->80/tcp" {
		t.Errorf("String: %s", s)
	}
	if s := (PortMapping{HostIP: "::1", HostPort: 8080, ContainerPort: 80, Protocol: "udp"}).String(); s != "[::1]:8080->80/udp" {
		t.Errorf("String v6: %s", s)
	}
}
