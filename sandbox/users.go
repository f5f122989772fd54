package sandbox

import (
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/user"

	"github.com/slopbox/slopbox/backend"
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

func (e *unknownUserError) Error() string        { return e.msg }
func (e *unknownUserError) Is(target error) bool { return target == backend.ErrUnknownUser }

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
