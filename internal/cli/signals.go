package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// stopSignals end a command: the root context of every command is
// cancelled by the first of them (see withSignals). SIGHUP is among them
// so that a closed terminal tears a 'run' sandbox down as Ctrl-C does.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// ExitInterrupted is the exit code of a command that a signal cut short
// (as a shell reports SIGINT): whatever it had created was cleaned up.
const ExitInterrupted = 130

// errInterrupted is the cause of a root context a signal cancelled.
type errInterrupted struct{ sig os.Signal }

func (e errInterrupted) Error() string { return "interrupted by " + e.sig.String() }

// interrupted reports whether ctx was cancelled by a signal.
func interrupted(ctx context.Context) bool {
	var e errInterrupted
	return errors.As(context.Cause(ctx), &e)
}

// withSignals returns a context cancelled by the first of sigs to arrive,
// and a function that releases the signals (call it when done). A command
// winds down when its context ends: serve shuts the daemon down, run tears
// its sandbox down, follow and watch stop, a request in flight is
// abandoned. The first signal also gives the signals back their default
// action, so a second one ends the process at once, whatever it was
// doing. A signal the process was started with ignored (SIGHUP under
// nohup) stays ignored.
func withSignals(parent context.Context, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	var watched []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			watched = append(watched, s)
		}
	}
	ch := make(chan os.Signal, 1)
	done := make(chan struct{})
	if len(watched) > 0 {
		signal.Notify(ch, watched...)
		go func() {
			select {
			case s := <-ch:
				signal.Stop(ch) // the next one takes the default action
				cancel(errInterrupted{s})
			case <-done:
			}
		}()
	}
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(done)
			signal.Stop(ch)
			cancel(nil)
		})
	}
}
