// Package auth authenticates callers by bearer API key.
//
// The same Authenticator serves two places: the Lambda authorizer in AWS,
// whose answers API Gateway caches for a short time, and the local server's
// middleware, which wraps it in a Cache so that a request does not cost a
// DynamoDB read. Keys are held by their SHA-256 only, never in plaintext, and
// Forget drops an agent's entries at once when it is removed.
package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Authenticator turns an API key into the principal that owns it. An unknown
// or revoked key is lease.ErrUnauthorized; any other error is internal.
// *lease.Store satisfies it.
type Authenticator interface {
	Authenticate(ctx context.Context, apiKey string) (lease.Principal, error)
}

// MaxKeyLen bounds the keys that are looked up at all; longer ones are
// refused without a lookup.
const MaxKeyLen = 512

// maxEntries bounds the cache; when it is full, expired entries are dropped
// and, if that is not enough, the whole cache is cleared.
const maxEntries = 10000

// Cache remembers successful authentications for a while. Failures are not
// remembered: a key that did not work is looked up again next time.
type Cache struct {
	next Authenticator
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]entry
	// gen grows with every Forget, so that a lookup that started before a
	// revocation does not put the revoked principal back.
	gen uint64
}

type entry struct {
	p       lease.Principal
	expires time.Time
}

// NewCache caches a's successful answers for ttl. now is the clock (nil:
// time.Now).
func NewCache(a Authenticator, ttl time.Duration, now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{next: a, ttl: ttl, now: now, entries: make(map[[sha256.Size]byte]entry)}
}

// Authenticate answers from the cache, or asks the wrapped Authenticator and
// remembers a success.
func (c *Cache) Authenticate(ctx context.Context, apiKey string) (lease.Principal, error) {
	if apiKey == "" || len(apiKey) > MaxKeyLen {
		return lease.Principal{}, lease.ErrUnauthorized
	}
	h := sha256.Sum256([]byte(apiKey))
	c.mu.Lock()
	e, ok := c.entries[h]
	now := c.now()
	if ok && now.Before(e.expires) {
		c.mu.Unlock()
		return e.p, nil
	}
	if ok {
		delete(c.entries, h)
	}
	gen := c.gen
	c.mu.Unlock()

	p, err := c.next.Authenticate(ctx, apiKey)
	if err != nil {
		return lease.Principal{}, err
	}
	if c.ttl <= 0 {
		return p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		if len(c.entries) >= maxEntries {
			c.prune(c.now())
		}
		c.entries[h] = entry{p: p, expires: c.now().Add(c.ttl)}
	}
	return p, nil
}

func (c *Cache) prune(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
		}
	}
	if len(c.entries) >= maxEntries {
		clear(c.entries)
	}
}

// Forget drops every cached key of the agent, so a removed agent's key stops
// working at once.
func (c *Cache) Forget(agentID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k, e := range c.entries {
		if e.p.AgentID == agentID {
			delete(c.entries, k)
		}
	}
}

// BearerKey extracts the key from an Authorization header of the form
// "Bearer <key>". The scheme is case-insensitive; the key must be one
// non-empty token of printable ASCII.
func BearerKey(header string) (string, bool) {
	scheme, key, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimLeft(key, " ")
	if key == "" || len(key) > MaxKeyLen {
		return "", false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return "", false
		}
	}
	return key, true
}

// ErrInternal is what the authorizer returns when the key could not be
// checked (the store failed): the request is refused with a 5xx, not a
// cached denial.
var ErrInternal = errors.New("auth: could not check the api key")
