package ratelimit

import (
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Clients hands out one Redis client per address, created on first use and
// shared by every route naming that address (each client is a connection
// pool). The zero value is not usable; call NewClients.
type Clients struct {
	options func(addr string) *redis.Options

	mu      sync.Mutex
	clients map[string]*redis.Client
	closed  bool
}

// NewClients returns an empty registry whose clients use [ClientOptions].
func NewClients() *Clients {
	return &Clients{options: ClientOptions, clients: make(map[string]*redis.Client)}
}

// ClientOptions are the options of the clients [Clients] creates. Timeouts
// are short because a request waits for the limiter: a slow Redis should
// fail open quickly rather than stall traffic, so dialing is tried once per
// call, not five times. Command retries are off because a script retried
// after a lost reply could charge twice; a failed call just fails open once.
func ClientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:          addr,
		DialTimeout:   time.Second,
		DialerRetries: 1,
		ReadTimeout:   500 * time.Millisecond,
		WriteTimeout:  500 * time.Millisecond,
		MaxRetries:    -1,
	}
}

// Get returns the client for addr ("host:port"), creating it when needed.
// Creating a client does not connect; an unreachable Redis shows up as an
// error from the limiter's calls.
func (c *Clients) Get(addr string) (*redis.Client, error) {
	if addr == "" {
		return nil, errors.New("ratelimit: empty redis address")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("ratelimit: redis clients closed")
	}
	cl := c.clients[addr]
	if cl == nil {
		cl = redis.NewClient(c.options(addr))
		c.clients[addr] = cl
	}
	return cl, nil
}

// Limiter returns a Redis limiter on the client for addr.
func (c *Clients) Limiter(addr string) (*Redis, error) {
	cl, err := c.Get(addr)
	if err != nil {
		return nil, err
	}
	return NewRedis(cl), nil
}

// Close closes every client; later Gets fail. It returns the first error.
func (c *Clients) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var first error
	for addr, cl := range c.clients {
		if err := cl.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.clients, addr)
	}
	return first
}
