package setup

// The guard that keeps the functions off today's tasks table until the
// tasks of a table of the earlier schema have been copied into it
// (lease/migrate.go). Locally lease.EnsureTables refuses to start the server
// over such a table; in AWS the stack has no start to refuse, so each
// function that reads or writes tasks (deploy.AwaitsMigration) checks for
// itself. Serving an empty tasks table in the meantime would let a client
// re-create a task that the migration then skips as already copied: a done
// task reopened, its fences starting at 1 again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease/schema"
)

// MigratedMarker is the task_id of the item `checkout-server migrate` puts
// in the earlier tasks table once every task is copied (lease/migrate.go's
// migratedMarker).
const MigratedMarker = "#migrated"

// MigrationRecheck is how long a guard trusts an answer that the earlier
// tasks table is not migrated yet before it reads the marker again. An
// answer that it is (or that there is no earlier table) is kept for good.
const MigrationRecheck = 30 * time.Second

// migrationCheckTimeout bounds the check a function makes at its cold
// start; a check that cannot finish is made again on the first request.
const migrationCheckTimeout = 3 * time.Second

// ErrNotMigrated says that a tasks table of the earlier schema exists and
// `checkout-server migrate -aws` has not finished copying it.
var ErrNotMigrated = errors.New("the tasks of the earlier tasks table have not been migrated")

// NotMigratedMessage is the error sentence of the 503 unavailable answer
// the guarded functions give while the migration has not run.
const NotMigratedMessage = "tasks are not served until the tasks of the earlier schema are copied: " +
	"an operator must run `checkout-server migrate -aws` with this deployment's CHECKOUT_TABLE_PREFIX; retry after it has run"

// GetItemAPI is the one DynamoDB call the migration guard makes.
type GetItemAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// MigrationGuard says whether today's tasks table may be served: yes when
// there is no tasks table of the earlier schema (schema.TasksTableV1), or
// when it carries the marker of a finished migration. It reads the marker
// with one consistent GetItem, and caches the answer: "migrated" for good,
// "not migrated" for MigrationRecheck. A nil guard lets everything through.
type MigrationGuard struct {
	db    GetItemAPI
	table string
	now   func() time.Time
	log   *slog.Logger

	mu        sync.Mutex
	migrated  bool
	refusedAt time.Time // when the marker was last found missing; zero: never
}

// NewMigrationGuard is the guard of the deployment e over db.
func NewMigrationGuard(db GetItemAPI, e Env, log *slog.Logger) *MigrationGuard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &MigrationGuard{db: db, table: schema.Names{Prefix: e.TablePrefix}.Table(schema.TasksTableV1), now: e.clock(), log: log}
}

// Table is the name of the earlier tasks table the guard checks.
func (g *MigrationGuard) Table() string { return g.table }

// Check is nil when the tasks may be served, ErrNotMigrated (wrapped) while
// the earlier table waits for the migration, and the read's error when the
// marker could not be read (nothing is cached then).
func (g *MigrationGuard) Check(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.migrated {
		return nil
	}
	if !g.refusedAt.IsZero() && g.now().Sub(g.refusedAt) < MigrationRecheck {
		return g.refusal()
	}
	out, err := g.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &g.table,
		Key:            map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: MigratedMarker}},
		ConsistentRead: aws.Bool(true),
	})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		g.migrated = true // no earlier table: nothing to wait for
		return nil
	case err != nil:
		return fmt.Errorf("read the migration marker in %s: %w", g.table, err)
	case len(out.Item) > 0:
		if !g.refusedAt.IsZero() {
			g.log.Info("the earlier tasks table is migrated: serving tasks", "table", g.table)
		}
		g.migrated = true
		return nil
	}
	g.refusedAt = g.now()
	g.log.Warn("tasks are not served: the earlier tasks table has not been migrated; run `checkout-server migrate -aws`",
		"table", g.table, "recheck_in_s", MigrationRecheck.Seconds())
	return g.refusal()
}

func (g *MigrationGuard) refusal() error {
	return fmt.Errorf("%w: %s exists without the marker of a finished `checkout-server migrate -aws`", ErrNotMigrated, g.table)
}

// coldStart makes the guard's first check, within migrationCheckTimeout.
func (g *MigrationGuard) coldStart() {
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrationCheckTimeout)
	defer cancel()
	if err := g.Check(ctx); err != nil && !errors.Is(err, ErrNotMigrated) {
		g.log.Warn("migration check at cold start failed; checking again on the first request", "error", err.Error())
	}
}

// migrationRetryAfter is the Retry-After of the answer while the migration
// has not run: the guard does not look again sooner.
var migrationRetryAfter = fmt.Sprint(int(MigrationRecheck.Seconds()))

// guardHTTP answers every request with 503 unavailable while g says the
// tasks may not be served, and passes it to next otherwise.
func guardHTTP(g *MigrationGuard, log *slog.Logger, next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := g.Check(r.Context())
		if err == nil {
			next.ServeHTTP(w, r)
			return
		}
		msg, retry := NotMigratedMessage, migrationRetryAfter
		if !errors.Is(err, ErrNotMigrated) {
			msg, retry = "the database cannot be reached; retry shortly", "1"
			log.LogAttrs(r.Context(), slog.LevelError, "migration check failed",
				slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		}
		w.Header().Set("Retry-After", retry)
		if id := r.Header.Get(httpapi.RequestIDHeader); id != "" {
			w.Header().Set(httpapi.RequestIDHeader, id)
		}
		writeError(w, http.StatusServiceUnavailable, errcode.Unavailable, msg)
	})
}
