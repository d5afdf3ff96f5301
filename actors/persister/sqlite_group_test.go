package persister

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// Tests of the SQLite store's group commit and WAL checkpoint policy
// (sqlite_group.go).

// groupFixture is n sessions of two text turns each, created in s, with
// k1[i] the length of session i's first turn.
type groupFixture struct {
	builders []*logBuilder
	k1       []int64
}

func newGroupFixture(t *testing.T, s Store, prefix string, n int) *groupFixture {
	t.Helper()
	f := &groupFixture{}
	for i := range n {
		b := newLogBuilder(t, session.SessionID(fmt.Sprintf("%s-%d", prefix, i)))
		b.textTurn("one", "1")
		f.k1 = append(f.k1, b.len())
		b.textTurn("two", "2")
		require.NoError(t, s.Create(b.header()))
		f.builders = append(f.builders, b)
	}
	return f
}

// requireStored checks that s holds both turns of every session.
func (f *groupFixture) requireStored(t *testing.T, s Store) {
	t.Helper()
	for _, b := range f.builders {
		got, err := s.ReadFrom(t.Context(), b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, b.events(), got)
	}
}

// firstTurns and secondTurns are the group of every session's first
// (second) turn.
func (f *groupFixture) firstTurns() []groupBatch {
	var bs []groupBatch
	for i, b := range f.builders {
		bs = append(bs, groupBatch{ID: b.id(), Events: b.events()[:f.k1[i]], Durable: true})
	}
	return bs
}

func (f *groupFixture) secondTurns() []groupBatch {
	var bs []groupBatch
	for i, b := range f.builders {
		bs = append(bs, groupBatch{ID: b.id(), Events: b.from(f.k1[i]), Durable: true})
	}
	return bs
}

// revisionNumber is the revision count at the end of a SQLite revision
// token.
func revisionNumber(t *testing.T, r Revision) string {
	t.Helper()
	i := strings.LastIndex(string(r), ":revision:")
	require.GreaterOrEqual(t, i, 0, "revision %q", r)
	return string(r)[i+len(":revision:"):]
}

func revisionsOf(t *testing.T, s Store) map[session.SessionID]string {
	t.Helper()
	listed, err := s.List(t.Context())
	require.NoError(t, err)
	out := map[session.SessionID]string{}
	for _, l := range listed {
		out[l.Header.ID] = revisionNumber(t, l.Revision)
	}
	return out
}

// TestSQLiteAppendGroupCommitsEverySession: one group holds the first
// appends of six sessions (their rows inserted with them), the next their
// second turns, with an empty barrier batch among them; each session
// stores exactly its events and its revision counts one per group it had
// rows in.
func TestSQLiteAppendGroupCommitsEverySession(t *testing.T) {
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	f := newGroupFixture(t, s, "group", 6)
	ctx := t.Context()
	for i, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err, "batch %d", i)
	}
	second := f.secondTurns()
	second[2].Events = nil // a barrier alone
	for i, err := range s.appendGroup(ctx, feed(second)) {
		require.NoError(t, err, "batch %d", i)
	}
	revs := revisionsOf(t, s)
	for i, b := range f.builders {
		want := b.events()
		rev := "2"
		if i == 2 {
			want, rev = want[:f.k1[i]], "1"
		}
		got, err := s.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, want, got)
		require.Equal(t, rev, revs[b.id()], "%s", b.id())
	}
}

// TestSQLiteAppendGroupWritesSavepointsOnlyToRetryAFailure: a group whose
// sessions all succeed is written without a single savepoint statement.
// When a session fails inside the transaction (an injected failure of its
// rows' INSERT, after the first session's rows went in), the transaction
// is rolled back whole and written again with a savepoint per session:
// the failing session fails alone, and the others, written twice, are
// stored once (their revision bumped once).
func TestSQLiteAppendGroupWritesSavepointsOnlyToRetryAFailure(t *testing.T) {
	ctx := t.Context()
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	f := newGroupFixture(t, s, "retry", 3)
	savepoints := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.stmts.stmts["SAVEPOINT group_batch"]
		return ok
	}
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	require.False(t, savepoints(), "a group without failures writes no savepoint")

	fault := errors.New("injected insert failure")
	inserts := map[session.SessionID]int{}
	s.mu.Lock()
	s.insertFault = func(id session.SessionID, seq int64) error {
		inserts[id]++
		if id == f.builders[1].id() {
			return fault
		}
		return nil
	}
	s.mu.Unlock()
	errs := s.appendGroup(ctx, feed(f.secondTurns()))
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], fault)
	require.NoError(t, errs[2])
	require.True(t, savepoints(), "the retry writes a savepoint per session")
	require.Equal(t, 2, inserts[f.builders[0].id()], "written, rolled back, written again")
	require.Equal(t, 1, inserts[f.builders[2].id()], "written by the retry only")
	revs := revisionsOf(t, s)
	for i, b := range f.builders {
		want, rev := b.events(), "2"
		if i == 1 {
			want, rev = want[:f.k1[i]], "1"
		}
		got, err := s.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, want, got)
		require.Equal(t, rev, revs[b.id()], "%s", b.id())
	}
}

// TestSQLiteAppendGroupFailsOnlyTheRefusedSessions: a stale writer's
// batch (another writer of the database appended first: its tail check
// refuses it inside the transaction), a batch with a gap and a batch for
// a session never created each fail alone; the other sessions of the
// group commit, and the refused ones are left as they were.
func TestSQLiteAppendGroupFailsOnlyTheRefusedSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	defer s.Close()
	f := newGroupFixture(t, s, "fence", 4)
	ctx := t.Context()
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	// Another writer of the database appends session 1's second turn.
	other := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	stale := f.builders[1]
	require.NoError(t, other.Append(ctx, stale.id(), stale.from(f.k1[1]), Sync))
	require.NoError(t, other.Close())
	before := revisionsOf(t, s)

	group := f.secondTurns()
	gap := f.builders[2]
	group[2].Events = append(gap.from(f.k1[2])[:1:1], gap.from(f.k1[2])[2:]...)
	group = append(group, groupBatch{ID: "never-created", Events: f.builders[3].events()[:1], Durable: true})
	errs := s.appendGroup(ctx, feed(group))
	require.Len(t, errs, 5)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrFenced, "the stale writer's batch")
	require.ErrorContains(t, errs[1], string(stale.id()))
	require.ErrorIs(t, errs[2], ErrFenced, "a gap in the batch")
	require.NoError(t, errs[3])
	require.ErrorIs(t, errs[4], ErrNotFound)

	after := revisionsOf(t, s)
	for i, b := range f.builders {
		got, err := s.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		switch i {
		case 0, 3:
			requireSameEvents(t, b.events(), got)
			require.Equal(t, "2", after[b.id()])
		case 1: // as the other writer left it
			requireSameEvents(t, b.events(), got)
			require.Equal(t, before[b.id()], after[b.id()])
		case 2:
			requireSameEvents(t, b.events()[:f.k1[i]], got)
			require.Equal(t, before[b.id()], after[b.id()])
		}
	}
	require.NotContains(t, after, session.SessionID("never-created"))
}

// TestSQLiteAppendGroupFailedTransactionFailsEverySession: when the
// transaction itself fails (here another client changed the schema
// version: the ownership check refuses to write), every session of the
// group fails and nothing of any is stored; the same group commits once
// the database is right again.
func TestSQLiteAppendGroupFailedTransactionFailsEverySession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	f := newGroupFixture(t, s, "whole", 3)
	ctx := t.Context()
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.ExecContext(ctx, "PRAGMA user_version = 16")
	require.NoError(t, err)

	errs := s.appendGroup(ctx, feed(f.secondTurns()))
	for i, err := range errs {
		require.Error(t, err, "batch %d", i)
		require.ErrorContains(t, err, string(f.builders[i].id()))
		require.ErrorContains(t, err, "schema")
	}
	_, err = raw.ExecContext(ctx, "PRAGMA user_version = 17")
	require.NoError(t, err)
	for i, b := range f.builders {
		got, err := s.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, b.events()[:f.k1[i]], got)
	}
	for _, err := range s.appendGroup(ctx, feed(f.secondTurns())) {
		require.NoError(t, err)
	}
	f.requireStored(t, s)
}

// TestSQLiteCheckpointsOffTheCommitPath: the writer connection never
// checkpoints on commit (wal_autocheckpoint 0); the checkpointer does,
// in the background, once the WAL passes its threshold (lowered here);
// Close leaves the database whole, without a WAL, and it opens again
// with every event.
func TestSQLiteCheckpointsOffTheCommitPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	ctx := t.Context()
	var auto int
	require.NoError(t, s.conn.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto))
	require.Zero(t, auto, "no checkpoint on the commit path")
	require.NotNil(t, s.checkpoints)
	s.checkpoints.limit.Store(64 << 10)

	f := newGroupFixture(t, s, "wal", 40)
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	deadline := time.Now().Add(time.Minute)
	for i := 0; first(s.checkpoints.checkpointRuns()) == 0; i++ {
		require.True(t, time.Now().Before(deadline), "no checkpoint ran")
		// Keep committing: each commit tells the checkpointer to look.
		b := newLogBuilder(t, session.SessionID(fmt.Sprintf("wal-more-%d", i)))
		b.textTurn("one", "1")
		require.NoError(t, s.Create(b.header()))
		for _, err := range s.appendGroup(ctx, feed([]groupBatch{{ID: b.id(), Events: b.events(), Durable: true}})) {
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Close())
	_, err := os.Stat(path + "-wal")
	require.ErrorIs(t, err, os.ErrNotExist, "closed: the WAL is in the database")

	again := openTestSQLite(t, path, SQLiteOptions{})
	defer again.Close()
	for i, b := range f.builders {
		got, err := again.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, b.events()[:f.k1[i]], got)
	}
}

// TestSQLiteTailIsCheckedOnlyAfterAnotherWriter: the tail check of an
// append (reading and decoding the session's last rows) runs on a
// session's first append and after another connection committed to the
// database, not on every append: the store knows the tail it wrote. A
// checkpoint of the WAL is no write and checks nothing again. Another
// writer that appended behind the store's back still fences its next
// append, in Append and in appendGroup alike.
func TestSQLiteTailIsCheckedOnlyAfterAnotherWriter(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	defer s.Close()
	checks := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.tailChecks
	}
	b := newLogBuilder(t, "session-tail")
	b.textTurn("one", "1")
	b.textTurn("two", "2")
	b.textTurn("three", "3")
	all := b.events()
	require.GreaterOrEqual(t, len(all), 12)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), all[:2], NoSync))
	require.NoError(t, s.Append(ctx, b.id(), all[2:4], Sync))
	require.NoError(t, s.appendGroup(ctx, feed([]groupBatch{{ID: b.id(), Events: all[4:5]}}))[0])
	var busy, frames, done int
	require.NoError(t, s.checkpoints.db.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done))
	require.NoError(t, s.Append(ctx, b.id(), all[5:6], Sync))
	require.Equal(t, 1, checks(), "only the first append checks the tail")

	other := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	require.NoError(t, other.Append(ctx, b.id(), all[6:8], Sync))
	err := s.Append(ctx, b.id(), all[6:7], Sync)
	requireFenced(t, err, b.id(), 8, 6)
	require.Equal(t, 2, checks())
	require.NoError(t, s.Append(ctx, b.id(), all[8:9], Sync))
	require.Equal(t, 3, checks(), "a failed append checks again")
	require.NoError(t, s.Append(ctx, b.id(), all[9:10], Sync))
	require.Equal(t, 3, checks())

	require.NoError(t, other.Append(ctx, b.id(), all[10:11], Sync))
	require.NoError(t, other.Close())
	errs := s.appendGroup(ctx, feed([]groupBatch{{ID: b.id(), Events: all[10:12], Durable: true}}))
	requireFenced(t, errs[0], b.id(), 11, 10)
	got, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, all[:11], got)
}

// TestSQLiteOwnershipIsCheckedAgainOnlyAfterAnotherWriter: the ownership
// checks (application id, schema, user version) run in the first mutating
// transaction and again only once another connection committed; a schema
// version changed by another client is still refused at the next append
// (the session cut back to its barrier), and the appends go on once it is
// put back.
func TestSQLiteOwnershipIsCheckedAgainOnlyAfterAnotherWriter(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	checks := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.ownershipChecks
	}
	f := newGroupFixture(t, s, "owner", 2)
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	b := f.builders[0]
	require.NoError(t, s.Append(ctx, b.id(), b.events()[f.k1[0]:f.k1[0]+1], NoSync))
	require.Equal(t, 1, checks(), "nothing else wrote to the database")

	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.ExecContext(ctx, "PRAGMA user_version = 16")
	require.NoError(t, err)
	err = s.Append(ctx, b.id(), b.events()[f.k1[0]+1:f.k1[0]+2], NoSync)
	require.ErrorContains(t, err, "schema")
	require.Equal(t, 2, checks())
	_, err = raw.ExecContext(ctx, "PRAGMA user_version = 17")
	require.NoError(t, err)
	// The refused append cut the session back to its barrier.
	require.NoError(t, s.Append(ctx, b.id(), b.events()[f.k1[0]:f.k1[0]+2], NoSync))
	require.Equal(t, 3, checks())
	second := f.secondTurns()
	second[0].Events = b.from(f.k1[0] + 2)
	for _, err := range s.appendGroup(ctx, feed(second)) {
		require.NoError(t, err)
	}
	require.Equal(t, 3, checks())
	for _, b := range f.builders {
		requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
	}
}

// TestSQLiteAppendGroupSessionFailingMidRowsFailsAlone: a session whose
// append fails part way through its rows (rows of its batch already
// inserted in the group's transaction; here an injected failure of its
// second INSERT statement) is rolled back to its savepoint: none of its
// rows stay, nor its session row on a first append, nor its revision
// bump, and it is cut back to its last barrier (the rows appended since
// without durable are deleted), as after a failed Append. The other
// sessions of the group commit. Appended again from its barrier, the
// failed session's events are all stored.
func TestSQLiteAppendGroupSessionFailingMidRowsFailsAlone(t *testing.T) {
	ctx := t.Context()
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	// Sessions 0 and 1 are stored (a durable turn, then a write-behind
	// batch), session 2 is new; each has a long turn to append next:
	// more rows than one INSERT statement takes.
	f := newGroupFixture(t, s, "mid", 3)
	var barrier, behind []int64
	for i, b := range f.builders {
		barrier = append(barrier, f.k1[i])
		behind = append(behind, b.len())
		turn := b.beginTurn("long")
		for step := range int64(2 * insertRowsMax) { // a scalar row each
			b.beginStep(turn, step+1)
			b.add(session.StepEnd{Turn: turn, Step: step + 1}.Draft())
		}
		b.endTurn(turn)
	}
	first := f.firstTurns()[:2]
	for _, err := range s.appendGroup(ctx, feed(first)) {
		require.NoError(t, err)
	}
	for i := range 2 {
		b := f.builders[i]
		require.NoError(t, s.Append(ctx, b.id(), b.events()[barrier[i]:behind[i]], NoSync))
	}
	before := revisionsOf(t, s)
	group := func() []groupBatch {
		return []groupBatch{
			{ID: f.builders[0].id(), Events: f.builders[0].from(behind[0]), Durable: true},
			{ID: f.builders[1].id(), Events: f.builders[1].from(behind[1]), Durable: true},
			{ID: f.builders[2].id(), Events: f.builders[2].events(), Durable: true},
		}
	}
	fault := errors.New("injected insert failure")
	var statements []session.SessionID
	s.mu.Lock()
	s.insertFault = func(id session.SessionID, seq int64) error {
		statements = append(statements, id)
		if id != f.builders[0].id() && slices.Index(statements, id) != len(statements)-1 {
			return fault // the session's second INSERT: its first rows are in
		}
		return nil
	}
	s.mu.Unlock()
	errs := s.appendGroup(ctx, feed(group()))
	require.NoError(t, errs[0])
	for _, i := range []int{1, 2} {
		require.ErrorIs(t, errs[i], fault)
		require.ErrorContains(t, errs[i], string(f.builders[i].id()))
	}
	got, err := s.ReadFrom(ctx, f.builders[0].id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, f.builders[0].events(), got)
	got, err = s.ReadFrom(ctx, f.builders[1].id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, f.builders[1].events()[:barrier[1]], got)
	_, err = s.ReadFrom(ctx, f.builders[2].id(), 0)
	require.ErrorIs(t, err, ErrNotFound, "the new session's row is rolled back with its rows")
	after := revisionsOf(t, s)
	require.NotContains(t, after, f.builders[2].id())
	require.NotEqual(t, before[f.builders[0].id()], after[f.builders[0].id()])

	s.mu.Lock()
	s.insertFault = nil
	s.mu.Unlock()
	retry := []groupBatch{
		{ID: f.builders[1].id(), Events: f.builders[1].from(barrier[1]), Durable: true},
		{ID: f.builders[2].id(), Events: f.builders[2].events(), Durable: true},
	}
	for _, err := range s.appendGroup(ctx, feed(retry)) {
		require.NoError(t, err)
	}
	for _, b := range f.builders {
		requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
	}
}

// TestSQLiteAppendGroupBarrierJoiningANormalCommitIsSynced: a group that
// starts with a write-behind batch commits with synchronous=NORMAL; a
// barrier taken after it started (a turn end that joined the group while
// it was written) makes the whole group a barrier, so the store syncs
// right after the commit: nothing is left unsynced, and every session of
// the group is at a barrier, which a later failed append cuts back to
// (the group's rows stay).
func TestSQLiteAppendGroupBarrierJoiningANormalCommitIsSynced(t *testing.T) {
	ctx := t.Context()
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	f := newGroupFixture(t, s, "late", 2)
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	second := f.secondTurns()
	second[0].Durable = false // write-behind first: the commit is NORMAL
	for _, err := range s.appendGroup(ctx, feed(second)) {
		require.NoError(t, err)
	}
	s.mu.Lock()
	unsynced := s.unsynced
	s.mu.Unlock()
	require.False(t, unsynced, "the late barrier synced the group")

	var third []groupBatch
	for _, b := range f.builders {
		n := b.len()
		b.textTurn("three", "3")
		third = append(third, groupBatch{ID: b.id(), Events: b.from(n)})
	}
	fault := errors.New("injected insert failure")
	s.mu.Lock()
	s.insertFault = func(session.SessionID, int64) error { return fault }
	s.mu.Unlock()
	for _, err := range s.appendGroup(ctx, feed(third)) {
		require.ErrorIs(t, err, fault)
	}
	for i, b := range f.builders {
		got, err := s.ReadFrom(ctx, b.id(), 0)
		require.NoError(t, err)
		requireSameEvents(t, b.events()[:b.len()-int64(len(third[i].Events))], got)
	}
}

func first[A, B any](a A, _ B) A { return a }

// TestSQLiteIdleCheckpointTruncatesTheWAL: once the store has committed
// nothing for a poll of the checkpointer, it checkpoints the WAL and
// truncates it to nothing (PASSIVE, then TRUNCATE); the next commit
// writes the WAL again, and the events are all there.
func TestSQLiteIdleCheckpointTruncatesTheWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	ctx := t.Context()
	f := newGroupFixture(t, s, "idle", 8)
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		require.NoError(t, err)
		return fi.Size()
	}
	require.Positive(t, walSize())
	require.Eventually(t, func() bool {
		// The count follows the truncation: wait for both.
		_, truncates := s.checkpoints.checkpointRuns()
		fi, err := os.Stat(path + "-wal")
		return err == nil && fi.Size() == 0 && truncates > 0
	}, 20*time.Second, 10*time.Millisecond, "the WAL of an idle store was not truncated")
	s.mu.Lock()
	checks := s.tailChecks
	s.mu.Unlock()
	for _, err := range s.appendGroup(ctx, feed(f.secondTurns())) {
		require.NoError(t, err)
	}
	require.Positive(t, walSize())
	s.mu.Lock()
	require.Equal(t, checks, s.tailChecks, "the writer truncated its own WAL: no tail is checked again")
	s.mu.Unlock()
	f.requireStored(t, s)
}

// TestSQLiteCheckpointRestartsALongWAL: when the last PASSIVE checkpoint
// found the WAL holding restartAt bytes of frames or more (writes that
// never pause let no PASSIVE checkpoint catch up), the writer runs a
// RESTART checkpoint before its next transaction that holds no turn end
// (a group whose first write is write-behind), so that this commit starts
// the WAL again; from twice restartAt, before a turn end's too; below it,
// never. The events stay whole.
func TestSQLiteCheckpointRestartsALongWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	ctx := t.Context()
	require.NoError(t, s.checkpoints.stop()) // this test runs the checkpoints itself
	c, err := newCheckpointer(ctx, s.conn, path, time.Second)
	require.NoError(t, err)
	s.checkpoints = c
	f := newGroupFixture(t, s, "restart", 40)
	for _, err := range s.appendGroup(ctx, feed(f.firstTurns())) {
		require.NoError(t, err)
	}
	ok, frames := c.checkpoint("PASSIVE")
	require.True(t, ok)
	require.Greater(t, frames, int64(4))
	require.Equal(t, frames, c.frames.Load())

	c.restartAt.Store((frames + 1) * walFrameBytes)
	third := len(f.builders) / 3
	second := f.secondTurns()
	for i := range second[third:] {
		second[third+i].Durable = false // write-behind, no turn end waiting
	}
	restarts := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.restarts
	}
	for _, err := range s.appendGroup(ctx, feed(second[third:2*third])) {
		require.NoError(t, err)
	}
	require.Zero(t, restarts(), "below restartAt: no RESTART")

	c.restartAt.Store(frames * walFrameBytes)
	for _, err := range s.appendGroup(ctx, feed(second[:1])) {
		require.NoError(t, err)
	}
	require.Zero(t, restarts(), "at restartAt: no RESTART before a turn end")
	for _, err := range s.appendGroup(ctx, feed(second[2*third:])) {
		require.NoError(t, err)
	}
	require.Equal(t, 1, restarts(), "at restartAt: a RESTART before a group without a turn end")
	ok, after := c.checkpoint("PASSIVE")
	require.True(t, ok)
	require.Less(t, after, frames, "the commit started the WAL again")

	c.restartAt.Store(after * walFrameBytes / 2)
	for _, err := range s.appendGroup(ctx, feed(second[1:third])) {
		require.NoError(t, err)
	}
	require.Equal(t, 2, restarts(), "at twice restartAt: a RESTART before a turn end too")
	f.requireStored(t, s)
}
