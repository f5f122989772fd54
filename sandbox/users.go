package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/moby/sys/user"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/internal/userns"
)

// identity is a resolved container user.
type identity struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Home   string   `json:"home,omitempty"`
}

// unknownUserError keeps docker's exact wording ("unable to find user NAME:
// no matching entries in passwd file") and matches backend.ErrUnknownUser.
type unknownUserError struct{ msg string }

func (e *unknownUserError) Error() string { return e.msg }
func (e *unknownUserError) Unwrap() error { return backend.ErrUnknownUser }

// resolveUser turns "uid[:gid]" or "name[:group]" into ids through the
// image's /etc/passwd and /etc/group, as docker does. An unknown name fails
// with docker's wording.
func resolveUser(layers []string, spec string) (identity, error) {
	if spec == "" {
		spec = "0:0"
	}
	passwd, group := imageFile(layers, "/etc/passwd"), imageFile(layers, "/etc/group")
	if passwd == "" {
		passwd = os.DevNull
	}
	if group == "" {
		group = os.DevNull
	}
	eu, err := user.GetExecUserPath(spec, &user.ExecUser{Home: "/"}, passwd, group)
	if err != nil {
		if strings.Contains(err.Error(), "no matching entries") {
			return identity{}, &unknownUserError{msg: strings.TrimSpace(err.Error())}
		}
		return identity{}, fmt.Errorf("user %q: %w", spec, err)
	}
	id := identity{UID: uint32(eu.Uid), GID: uint32(eu.Gid), Home: eu.Home}
	for _, g := range eu.Sgids {
		if uint32(g) != id.GID {
			id.Groups = append(id.Groups, uint32(g))
		}
	}
	return id, nil
}

// unmappedUserError names the id outside the sandbox's range and matches
// backend.ErrUnmappedUser.
type unmappedUserError struct{ msg string }

func (e *unmappedUserError) Error() string { return e.msg }
func (e *unmappedUserError) Unwrap() error { return backend.ErrUnmappedUser }

// checkMapped refuses a user whose uid, gid or supplementary groups the
// sandbox's user namespace (m) does not map: the kernel would only refuse
// to switch to it ("invalid argument") when a command starts. Sandboxes
// map container ids 0..65535, or only 0 without a subordinate range.
func checkMapped(who identity, m userns.Mapping) error {
	check := func(kind string, maps []userns.IDMap, id uint32) error {
		if _, ok := userns.ToHost(maps, id); ok {
			return nil
		}
		msg := fmt.Sprintf("%s %d is outside the sandbox's id range %s", kind, id, idRange(maps))
		if m.Warning != "" {
			msg += " (" + m.Warning + ")"
		}
		return &unmappedUserError{msg: msg}
	}
	if err := check("user", m.UIDs, who.UID); err != nil {
		return err
	}
	if err := check("group", m.GIDs, who.GID); err != nil {
		return err
	}
	for _, g := range who.Groups {
		if err := check("supplementary group", m.GIDs, g); err != nil {
			return err
		}
	}
	return nil
}

// idRange describes the container ids maps covers from 0 on ("0-65535").
func idRange(maps []userns.IDMap) string {
	next := uint64(0)
	for grew := true; grew; {
		grew = false
		for _, r := range maps {
			if uint64(r.ContainerID) <= next && next < uint64(r.ContainerID)+uint64(r.Size) {
				next, grew = uint64(r.ContainerID)+uint64(r.Size), true
			}
		}
	}
	if next == 0 {
		return "(none)"
	}
	return fmt.Sprintf("0-%d", next-1)
}

// addGroups resolves docker's --group-add values (names in the image's
// /etc/group, or ids) and adds them to who's supplementary groups.
func addGroups(layers []string, who *identity, add []string) ([]uint32, error) {
	if len(add) == 0 {
		return nil, nil
	}
	group := imageFile(layers, "/etc/group")
	if group == "" {
		group = os.DevNull
	}
	gids, err := user.GetAdditionalGroupsPath(add, group)
	if err != nil {
		return nil, fmt.Errorf("group-add %s: %w", strings.Join(add, ","), err)
	}
	var out []uint32
	for _, g := range gids {
		out = append(out, uint32(g))
	}
	who.Groups = withGroups(who.Groups, out)
	return out, nil
}

// withGroups is groups with add appended, each once.
func withGroups(groups, add []uint32) []uint32 {
	out := append([]uint32(nil), groups...)
	for _, g := range add {
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}
