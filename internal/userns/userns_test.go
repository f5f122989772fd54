package userns

import "testing"

func TestNestedMapsAndShiftAgree(t *testing.T) {
	n, err := ParseNested("u1000-g100")
	if err != nil {
		t.Fatal(err)
	}
	// Inside the nested namespace, container id c is outer id ToHost(c);
	// a file the sandbox must see as c is stored as Shift(c).
	for _, c := range []int{0, 1, 99, 100, 101, 999, 1000, 1001, 65535} {
		outU, ok := ToHost(n.UIDs, uint32(c))
		if !ok {
			t.Fatalf("uid %d unmapped", c)
		}
		if su, _ := n.Shift(c, 0); uint32(su) != outU {
			t.Errorf("uid %d: map says outer %d, shift stores %d", c, outU, su)
		}
		outG, _ := ToHost(n.GIDs, uint32(c))
		if _, sg := n.Shift(0, c); uint32(sg) != outG {
			t.Errorf("gid %d: map says outer %d, shift stores %d", c, outG, sg)
		}
	}
	if u, _ := ToHost(n.UIDs, 1000); u != 0 {
		t.Errorf("the sandbox user is outer %d, want 0 (the invoking user)", u)
	}
	var total uint32
	for _, m := range n.UIDs {
		total += m.Size
	}
	if total != DefaultSize {
		t.Errorf("nested map covers %d ids, want %d", total, DefaultSize)
	}
	if _, err := ParseNested("bogus"); err == nil {
		t.Error("a bad key parsed")
	}
}
