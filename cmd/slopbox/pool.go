package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/slopbox/slopbox/backend"
	"github.com/slopbox/slopbox/sandbox"
)

// poolCmd is the CLI's warm pool (issue 45): opt-in, one keeper process
// per state root that keeps sandboxes started for the runs that follow.
func poolCmd() *cobra.Command {
	c := &cobra.Command{Use: "pool", Short: "Keep sandboxes started ahead of need for run (opt-in; off by default)"}
	c.AddCommand(poolKeepCmd(), poolLsCmd(), poolRmCmd(), poolKeeperCmd())
	return c
}

func poolKeepCmd() *cobra.Command {
	var sf spawnFlags
	var count int
	var rm bool
	c := &cobra.Command{
		Use:   "keep [--count N] [--rm=false] [run flags] IMAGE",
		Short: "Keep N sandboxes of IMAGE started, for the runs with these settings (user, network, read-only, capabilities, tmpfs) to claim",
		Long: "Keep N sandboxes of IMAGE started, for the runs with these settings (user, network, read-only, capabilities, tmpfs) to claim.\n\n" +
			"A keeper process starts (one per state root) and keeps them, refilling what runs claim; `slopbox pool rm` or `slopbox prune` stops it. " +
			"A run whose settings match claims one and gets exactly what a cold start gives (its own mounts, hostname and environment are put in place at the claim); " +
			"any other run starts cold as without a pool. By default the sandboxes are for `run --rm`; --rm=false keeps them for run and run -d.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			b, err := openBackend()
			if err != nil {
				return err
			}
			defer b.Close()
			if _, err := ensureImage(ctx, b, args[0]); err != nil {
				return err
			}
			spec, _, err := sf.spec(cmd.Flags(), args[0], nil)
			if err != nil {
				return err
			}
			spec.Disposable = rm
			k, err := startKeeper(b)
			if err != nil {
				return err
			}
			if err := k.Keep(spec, count); err != nil {
				return fmt.Errorf("pool keep: %w", err)
			}
			fmt.Printf("keeping %d sandboxes of %s ready (slopbox pool ls; slopbox pool rm)\n", count, args[0])
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	sf.register(c.Flags())
	c.Flags().IntVar(&count, "count", 2, "how many to keep started")
	c.Flags().BoolVar(&rm, "rm", true, "for run --rm (false: for run and run -d)")
	return c
}

// policyFile is the policy file in force ("" for none), which a keeper
// serves only askers under.
func policyFile() (string, error) {
	pol, err := loadPolicy()
	if err != nil || pol == nil {
		return "", err
	}
	return pol.File, nil
}

// startKeeper starts the state root's keeper unless one runs, and returns
// its client once it answers.
func startKeeper(b *sandbox.Backend) (*sandbox.Keeper, error) {
	pf, err := policyFile()
	if err != nil {
		return nil, err
	}
	if !b.KeeperRunning() {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(b.KeeperDir(), 0o700); err != nil {
			return nil, err
		}
		log, err := os.OpenFile(filepath.Join(b.KeeperDir(), "keeper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, err
		}
		defer log.Close()
		args := []string{"--root", globals.root}
		if globals.policy != "" {
			args = append(args, "--policy", globals.policy)
		}
		cmd := exec.Command(self, append(args, "pool", "keeper")...)
		cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("pool keep: start the keeper: %w", err)
		}
		go cmd.Wait() // reaped should it exit while this process waits for it
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if k := b.DialKeeper(pf); k != nil {
			if _, err := k.Kinds(); err == nil {
				return k, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pool keep: the keeper did not start (see %s)", filepath.Join(b.KeeperDir(), "keeper.log"))
		}
	}
}

func poolKeeperCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "keeper",
		Short:  "The pool's keeper process (started by pool keep)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackend()
			if err != nil {
				return err
			}
			pol, err := loadPolicy()
			if err != nil {
				return err
			}
			kp := sandbox.KeeperPolicy{}
			if pol != nil {
				kp.File, kp.Apply = pol.File, pol.ApplySpec
			}
			if err := b.ServeKeeper(kp); err != nil && !errors.Is(err, sandbox.ErrKeeperRunning) {
				return err
			}
			return nil
		},
	}
}

func poolLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the sandboxes kept ready",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return listPool() },
	}
}

// listPool prints the kinds kept ready and their sandboxes (pool ls, ps
// --pool); nothing when no keeper runs.
func listPool() error {
	b, err := openBackend()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "SANDBOX ID\tIMAGE\tUSER\tNETWORK\tFOR\tSTATUS")
	defer w.Flush()
	if !b.KeeperRunning() {
		return nil
	}
	k := b.DialKeeper("")
	if k == nil {
		return nil
	}
	kinds, err := k.Kinds()
	if err != nil {
		return err
	}
	for _, kind := range kinds {
		forWhat := "run -d, run"
		if kind.ForRm {
			forWhat = "run --rm"
		}
		for _, id := range kind.Ready {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", id[:12], kind.Image, kind.User, kind.Network, forWhat, "ready")
		}
		if kind.Pending > 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", "-", kind.Image, kind.User, kind.Network, forWhat, fmt.Sprintf("%d starting", kind.Pending))
		}
	}
	return nil
}

func poolRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm",
		Short: "Stop the pool: its keeper and every sandbox kept ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackend()
			if err != nil {
				return err
			}
			return stopPool(b)
		},
	}
}

// stopPoolOfRoot is stopPool of the state root in the global flags
// (prune stops the pool too).
func stopPoolOfRoot() error {
	b, err := openBackend()
	if err != nil {
		return err
	}
	return stopPool(b)
}

// stopPool stops the state root's keeper, if one runs.
func stopPool(b *sandbox.Backend) error {
	if !b.KeeperRunning() {
		return nil
	}
	k := b.DialKeeper("")
	if k == nil {
		return fmt.Errorf("pool rm: a keeper holds %s but has no socket", b.KeeperDir())
	}
	return k.Stop(30 * time.Second)
}

// claimFromPool asks the keeper, when one runs, for a sandbox of spec
// running command: nil when there is none of its kind (the run starts one
// cold, as without a pool).
func claimFromPool(b *sandbox.Backend, k *sandbox.Keeper, spec backend.SpawnSpec, command []string, detach bool) *sandbox.Sandbox {
	if k == nil {
		return nil
	}
	if spec.Workspace != "" && !filepath.IsAbs(spec.Workspace) {
		abs, err := filepath.Abs(spec.Workspace)
		if err != nil {
			return nil
		}
		spec.Workspace = abs
	}
	id := k.Spawn(spec, command, detach)
	if id == "" {
		return nil
	}
	sb, err := b.Open(id)
	if err != nil {
		return nil
	}
	return sb
}

// keeperFor is the keeper a run asks first, nil when none runs (the
// default: a stat of its socket).
func keeperFor(b *sandbox.Backend) *sandbox.Keeper {
	if b.DialKeeper("") == nil {
		return nil
	}
	pf, err := policyFile()
	if err != nil {
		return nil
	}
	return b.DialKeeper(strings.TrimSpace(pf))
}
