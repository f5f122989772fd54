package netd

import (
	"errors"
	"net/netip"
	"testing"
)

// TestStore: Docker's default pools in order, a given subnet checked for
// overlap (with other networks and the reserved ones), names unique,
// bad subnets and gateways refused with nothing recorded, lookups by id,
// name and prefix, and removal refused while in use.
func TestStore(t *testing.T) {
	s := OpenStore(t.TempDir())
	reserved := netip.MustParsePrefix("10.0.2.0/24")
	a, err := s.Create(CreateOptions{Name: "a"}, reserved)
	if err != nil || a.Subnet.String() != "172.18.0.0/16" || a.Gateway.String() != "172.18.0.1" {
		t.Fatalf("first network: %+v %v", a, err)
	}
	b, err := s.Create(CreateOptions{Name: "b"}, reserved)
	if err != nil || b.Subnet.String() != "172.19.0.0/16" {
		t.Fatalf("second network: %+v %v", b, err)
	}
	if _, err := s.Create(CreateOptions{Name: "a"}); !errors.Is(err, ErrNameUsed) {
		t.Errorf("a name in use: %v", err)
	}
	for _, o := range []CreateOptions{
		{Name: "c", Subnet: "172.18.5.0/24"},
		{Name: "c", Subnet: "10.0.0.0/16"},
	} {
		if _, err := s.Create(o, reserved); !errors.Is(err, ErrOverlap) {
			t.Errorf("%+v: %v, want an overlap", o, err)
		}
	}
	for _, o := range []CreateOptions{
		{Name: "c", Subnet: "10.5.0.1/24"},
		{Name: "c", Subnet: "fd00::/64"},
		{Name: "c", Subnet: "10.5.0.0/24", Gateway: "10.6.0.1"},
		{Name: "c", Subnet: "10.5.0.0/24", Gateway: "10.5.0.0"},
		{Name: "c", Subnet: "10.5.0.0/24", IPRange: "10.6.0.0/25"},
		{Name: "c", Gateway: "10.5.0.1"},
		{Name: "c", Subnet: "127.0.0.0/8"},
		{Name: "c", Subnet: "0.0.0.0/8"},
		{Name: "c", Subnet: "224.0.0.0/8"},
		{Name: "c", Subnet: "169.254.0.0/16"},
		{Name: "c", Subnet: "240.0.0.0/8"},
		{Name: "a/b"},
		{Name: "c\n"},
		{Name: "c", Driver: "overlay"},
	} {
		if _, err := s.Create(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want invalid", o, err)
		}
	}
	// (Not a name that is also hex: "c" would be a prefix of another
	// network's id one time in eight, and Get takes id prefixes.)
	c, err := s.Create(CreateOptions{Name: "given", Subnet: "10.5.0.0/24", Gateway: "10.5.0.254", IPRange: "10.5.0.128/25"})
	if err != nil || !c.Usable(netip.MustParseAddr("10.5.0.2")) || c.Usable(netip.MustParseAddr("10.5.0.254")) || c.Hosts().String() != "10.5.0.128/25" {
		t.Fatalf("given subnet: %+v %v", c, err)
	}
	all, _ := s.List()
	if len(all) != 3 {
		t.Errorf("%d networks recorded, want 3", len(all))
	}
	for _, ref := range []string{c.ID, "given", c.ID[:10]} {
		if got, err := s.Get(ref); err != nil || got.ID != c.ID {
			t.Errorf("Get(%s): %v", ref, err)
		}
	}
	inUse := errors.New("in use")
	if err := s.Remove("given", func(Config) error { return inUse }); !errors.Is(err, inUse) {
		t.Errorf("remove in use: %v", err)
	}
	if err := s.Remove("given", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("given"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after remove: %v", err)
	}
}
