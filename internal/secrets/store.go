package secrets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// FileName is the store's file in the data directory.
const FileName = "secrets.json"

// Audit kinds.
const (
	KindSet    = "secret.set"   // a secret created or rotated (intent first)
	KindRemove = "secret.rm"    // a secret removed (intent first)
	KindGrant  = "secret.grant" // a secret granted, asked for or refused for a sandbox
)

// fileFormat names the file's layout and is part of every record's
// associated data.
const fileFormat = "ironclaw-secrets-v1"

// maxFileBytes bounds what Open reads: MaxSecrets values, sealed and
// base64-encoded, and their metadata.
const maxFileBytes = MaxSecrets * (MaxValueBytes*2 + 8<<10)

// Auditor is what the store and the grants need of the audit log.
type Auditor interface {
	Begin(ctx context.Context, e audit.Entry) (*audit.Intent, error)
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
}

// Store keeps the secrets. It is safe for concurrent use; readers never
// wait for a writer's file write.
type Store struct {
	key    *Key
	path   string
	log    Auditor
	now    func() time.Time
	redact func([]string)

	wmu  sync.Mutex            // serialises changes
	view atomic.Pointer[state] // immutable; replaced whole by every change
}

// state is one version of the store's contents.
type state struct {
	api    map[string]*record // persisted
	policy map[string]*record // from the policy file, in memory only
}

func (s *state) get(name string) (*record, bool) {
	if r, ok := s.policy[name]; ok {
		return r, true
	}
	r, ok := s.api[name]
	return r, ok
}

func (s *state) count() int {
	n := len(s.policy)
	for name := range s.api {
		if _, shadowed := s.policy[name]; !shadowed {
			n++
		}
	}
	return n
}

// record is one sealed secret. ad is the metadata's exact JSON, the
// associated data its value was sealed with.
type record struct {
	id     string // stays across rotations; a new one after a remove
	meta   Meta
	ad     []byte
	nonce  []byte
	sealed []byte
}

// fileRecord is a record in the file.
type fileRecord struct {
	ID     string          `json:"id"`
	Meta   json.RawMessage `json:"meta"`
	Nonce  []byte          `json:"nonce"`
	Sealed []byte          `json:"sealed"`
}

type file struct {
	Format  string       `json:"format"`
	KeyID   string       `json:"key_id"`
	Secrets []fileRecord `json:"secrets"`
}

// Options configure Open.
type Options struct {
	// Audit receives secret.set and secret.rm (required for changes).
	Audit Auditor
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Redact, if set, is given every current value (of at least
	// minRedactBytes) at Open and after every change: the audit log's
	// redactor (audit.Redactor.SetExtra), so that a value that reaches a
	// record by some other way is still not written.
	Redact func(values []string)
}

// minRedactBytes is the shortest value handed to Options.Redact: a
// shorter one would redact common words everywhere.
const minRedactBytes = 8

// Open reads the store in path (FileName in the data directory), a
// missing file being an empty store. Every record is opened once, so a
// file sealed under another key, or edited, is refused here, naming the
// record, rather than at the first request that needs it.
func Open(path string, key *Key, opts Options) (*Store, error) {
	if key == nil {
		return nil, fmt.Errorf("%w: none given", ErrKey)
	}
	s := &Store{key: key, path: path, log: opts.Audit, now: opts.Now, redact: opts.Redact}
	if s.now == nil {
		s.now = time.Now
	}
	st := &state{api: map[string]*record{}, policy: map[string]*record{}}
	raw, err := readFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		var f file
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("secrets %s: damaged: %v", path, err)
		}
		if f.Format != fileFormat {
			return nil, fmt.Errorf("secrets %s: format %q, want %q", path, f.Format, fileFormat)
		}
		if f.KeyID != key.ID() {
			return nil, fmt.Errorf("%w: %s was sealed with key %s, the key file holds key %s: give the right --secrets-key-file", ErrKey, path, f.KeyID, key.ID())
		}
		if len(f.Secrets) > MaxSecrets {
			return nil, fmt.Errorf("secrets %s: %d secrets, at most %d", path, len(f.Secrets), MaxSecrets)
		}
		for i, fr := range f.Secrets {
			r, err := s.loadRecord(fr)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: record %d: %v", ErrKey, path, i, err)
			}
			if _, dup := st.api[r.meta.Name]; dup {
				return nil, fmt.Errorf("secrets %s: %s appears twice", path, r.meta.Name)
			}
			st.api[r.meta.Name] = r
		}
	}
	s.publish(st)
	return s, nil
}

// publish makes st the store's contents and tells Options.Redact.
func (s *Store) publish(st *state) {
	s.view.Store(st)
	if s.redact == nil {
		return
	}
	var vals []string
	for _, m := range []map[string]*record{st.api, st.policy} {
		for _, r := range m {
			if v, err := s.value(r); err == nil && len(v) >= minRedactBytes {
				vals = append(vals, string(v))
			}
		}
	}
	s.redact(vals)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets %s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secrets %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("secrets %s: larger than %d bytes", path, maxFileBytes)
	}
	return b, nil
}

// loadRecord checks one stored record: its metadata validates as stored
// and its value opens under the key with that metadata.
func (s *Store) loadRecord(fr fileRecord) (*record, error) {
	var m Meta
	dec := json.NewDecoder(bytes.NewReader(fr.Meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("metadata: %v", err)
	}
	norm, err := m.Normalize()
	if err != nil {
		return nil, err
	}
	if !slices.Equal(norm.Hosts, m.Hosts) || norm.Env != m.Env || norm.Header != m.Header || norm.Format != m.Format || norm.Grant != m.Grant || m.Source != SourceAPI {
		return nil, fmt.Errorf("%s: metadata not in its stored form", m.Name)
	}
	r := &record{id: fr.ID, meta: m, ad: fr.Meta, nonce: fr.Nonce, sealed: fr.Sealed}
	v, err := s.key.open(r.nonce, r.sealed, r.associated())
	if err != nil {
		return nil, fmt.Errorf("%s: does not open under this key (edited, or sealed under another key)", m.Name)
	}
	if err := CheckValue(v); err != nil {
		return nil, fmt.Errorf("%s: %v", m.Name, err)
	}
	clear(v)
	return r, nil
}

// associated is the data a record's value is sealed with: the file
// format, the record's id and its metadata, exactly.
func (r *record) associated() []byte {
	ad := make([]byte, 0, len(fileFormat)+len(r.id)+len(r.ad)+2)
	ad = append(ad, fileFormat...)
	ad = append(ad, 0)
	ad = append(ad, r.id...)
	ad = append(ad, 0)
	return append(ad, r.ad...)
}

// newRecord seals v with m.
func (s *Store) newRecord(id string, m Meta, v []byte) (*record, error) {
	ad, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	r := &record{id: id, meta: m, ad: ad}
	if r.nonce, r.sealed, err = s.key.seal(v, r.associated()); err != nil {
		return nil, err
	}
	return r, nil
}

// value opens a record's value. The caller must not keep it.
func (s *Store) value(r *record) ([]byte, error) {
	v, err := s.key.open(r.nonce, r.sealed, r.associated())
	if err != nil {
		return nil, fmt.Errorf("%w: secret %s does not open", ErrKey, r.meta.Name)
	}
	return v, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AddPolicy adds a read-only secret from the policy file (before the
// daemon serves). It shadows an API secret of the same name, which stays
// stored and returns once the policy no longer names it.
func (s *Store) AddPolicy(m Meta, value []byte) error {
	m, err := m.Normalize()
	if err != nil {
		return err
	}
	if err := CheckValue(value); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, m.Name, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	cur := s.view.Load()
	if _, dup := cur.policy[m.Name]; dup {
		return fmt.Errorf("%w: %s appears twice in the policy", ErrInvalid, m.Name)
	}
	next := &state{api: cur.api, policy: clone(cur.policy)}
	if next.count()+1 > MaxSecrets {
		return fmt.Errorf("%w: at most %d", ErrTooMany, MaxSecrets)
	}
	m.Source, m.Version, m.UpdatedAt = SourcePolicy, 1, s.now().UTC()
	r, err := s.newRecord(newID(), m, value)
	if err != nil {
		return err
	}
	next.policy[m.Name] = r
	s.publish(next)
	return nil
}

// Set creates or rotates an API secret for actor. Its intent is audited
// first (secret.set: the metadata, never the value); nothing changes if
// that or the file write fails. Errors: ErrInvalid, ErrReadOnly (a policy
// secret), ErrTooMany.
func (s *Store) Set(ctx context.Context, actor string, m Meta, value []byte) (Meta, error) {
	m, err := m.Normalize()
	if err != nil {
		return Meta{}, err
	}
	if err := CheckValue(value); err != nil {
		return Meta{}, err
	}
	if s.log == nil {
		return Meta{}, fmt.Errorf("%w: this store has no audit log", ErrUnavailable)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	cur := s.view.Load()
	if _, ok := cur.policy[m.Name]; ok {
		return Meta{}, fmt.Errorf("%w: %s is set in the policy file; change it there", ErrReadOnly, m.Name)
	}
	old, exists := cur.api[m.Name]
	if !exists && cur.count()+1 > MaxSecrets {
		return Meta{}, fmt.Errorf("%w: %d already, at most %d; remove one first", ErrTooMany, cur.count(), MaxSecrets)
	}
	id, version := newID(), int64(1)
	if exists {
		id, version = old.id, old.meta.Version+1
	}
	m.Source, m.Version, m.UpdatedAt = SourceAPI, version, s.now().UTC()
	r, err := s.newRecord(id, m, value)
	if err != nil {
		return Meta{}, err
	}
	next := &state{api: clone(cur.api), policy: cur.policy}
	next.api[m.Name] = r
	in, err := s.log.Begin(ctx, audit.Entry{Actor: actor, Kind: KindSet, Data: map[string]any{
		"name": m.Name, "hosts": m.Hosts, "env": m.Env, "header": m.Header, "format": m.Format, "grant": m.Grant,
		"version": m.Version, "rotation": exists,
	}})
	if err != nil {
		return Meta{}, fmt.Errorf("secrets: not set, as its audit record could not be written: %w", err)
	}
	if err := s.write(next); err != nil {
		_, _ = in.End(context.WithoutCancel(ctx), map[string]any{"error": err.Error()})
		return Meta{}, err
	}
	s.publish(next)
	if _, err := in.End(context.WithoutCancel(ctx), map[string]any{"version": m.Version}); err != nil {
		return m, fmt.Errorf("secrets: set, but its result record could not be written: %w", err)
	}
	return m, nil
}

// Remove deletes an API secret for actor, audited first (secret.rm: name
// and hosts). Sandboxes granted it keep their placeholder, which no longer
// opens anything. Errors: ErrNotFound, ErrReadOnly.
func (s *Store) Remove(ctx context.Context, actor, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if s.log == nil {
		return fmt.Errorf("%w: this store has no audit log", ErrUnavailable)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	cur := s.view.Load()
	if _, ok := cur.policy[name]; ok {
		return fmt.Errorf("%w: %s is set in the policy file; remove it there", ErrReadOnly, name)
	}
	old, ok := cur.api[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	next := &state{api: clone(cur.api), policy: cur.policy}
	delete(next.api, name)
	in, err := s.log.Begin(ctx, audit.Entry{Actor: actor, Kind: KindRemove, Data: map[string]any{"name": name, "hosts": old.meta.Hosts}})
	if err != nil {
		return fmt.Errorf("secrets: not removed, as its audit record could not be written: %w", err)
	}
	if err := s.write(next); err != nil {
		_, _ = in.End(context.WithoutCancel(ctx), map[string]any{"error": err.Error()})
		return err
	}
	s.publish(next)
	if _, err := in.End(context.WithoutCancel(ctx), map[string]any{"removed": true}); err != nil {
		return fmt.Errorf("secrets: removed, but its result record could not be written: %w", err)
	}
	return nil
}

// List is every secret's metadata, by name.
func (s *Store) List() []Meta {
	st := s.view.Load()
	out := make([]Meta, 0, st.count())
	for name, r := range st.api {
		if _, shadowed := st.policy[name]; !shadowed {
			out = append(out, r.meta)
		}
	}
	for _, r := range st.policy {
		out = append(out, r.meta)
	}
	slices.SortFunc(out, func(a, b Meta) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		out[i].Hosts = slices.Clone(out[i].Hosts)
	}
	return out
}

// Get is one secret's metadata.
func (s *Store) Get(name string) (Meta, error) {
	r, ok := s.view.Load().get(name)
	if !ok {
		return Meta{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	m := r.meta
	m.Hosts = slices.Clone(m.Hosts)
	return m, nil
}

func (s *Store) current(name string) (*record, bool) { return s.view.Load().get(name) }

// write replaces the file with st's API secrets: a temporary file in the
// same directory, fsynced, renamed over the old one, and the directory
// fsynced, so a crash leaves the old file or the new one.
func (s *Store) write(st *state) error {
	f := file{Format: fileFormat, KeyID: s.key.ID(), Secrets: make([]fileRecord, 0, len(st.api))}
	names := make([]string, 0, len(st.api))
	for name := range st.api {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r := st.api[name]
		f.Secrets = append(f.Secrets, fileRecord{ID: r.id, Meta: r.ad, Nonce: r.nonce, Sealed: r.sealed})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, ".secrets-*")
	if err != nil {
		return fmt.Errorf("secrets: write: %w", err)
	}
	defer os.Remove(tmp.Name())
	werr := tmp.Chmod(0o600)
	if werr == nil {
		_, werr = tmp.Write(b)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.path)
	}
	if errors.Is(werr, syscall.ENOSPC) || errors.Is(werr, syscall.EDQUOT) {
		return fmt.Errorf("%w: secrets: the disk is full; nothing was changed", errdefs.ErrInsufficientStorage)
	}
	if werr != nil {
		return fmt.Errorf("secrets: write %s: %w", s.path, werr)
	}
	syncDir(dir)
	return nil
}

func clone(m map[string]*record) map[string]*record {
	out := make(map[string]*record, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
