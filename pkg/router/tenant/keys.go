// Package tenant authenticates berth-router's callers by API key and names their tenant.
//
// Keys live in Kubernetes Secrets, as a cluster operator keeps every other credential: a
// Secret labelled berth.sh/router-api-key=true holds one key in its data field "key", and its
// label berth.sh/tenant names the tenant the key belongs to (a tenant may have several keys,
// one Secret each, which is how a key is rotated: add the new Secret, move clients, delete
// the old one). The router watches these Secrets with an informer whose list and watch carry
// the label selector, so a Secret added, changed or deleted takes effect within a watch
// event, without a restart.
//
// The key itself is never kept: the informer's transform replaces each Secret, before it
// enters the cache, by its name, labels, annotations and the SHA-256 of its key. A presented
// key is hashed and looked up by that hash; the comparison is on hashes, so its timing tells
// nothing about the stored keys.
//
// A tenant's token rate limit is written on its Secrets' annotations (see LimitsFrom).
package tenant

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/ratelimit"
)

// The Secret contract.
const (
	// APIKeyLabel marks a Secret as a berth-router API key (value "true"); the informer
	// selects on it, so no other Secret is ever read.
	APIKeyLabel = "berth.sh/router-api-key"
	// TenantLabel names the tenant the key belongs to.
	TenantLabel = "berth.sh/tenant"
	// KeyField is the data field holding the key.
	KeyField = "key"
	// InputTokensAnnotation, OutputTokensAnnotation and UnitAnnotation are the tenant's
	// token rate limit, as a ModelRoute's rateLimit writes it: input and output tokens per
	// unit (second, minute, hour, day or month; second when absent). Each is optional.
	InputTokensAnnotation  = "berth.sh/tenant-input-tokens-per-unit"
	OutputTokensAnnotation = "berth.sh/tenant-output-tokens-per-unit"
	UnitAnnotation         = "berth.sh/tenant-rate-limit-unit"
)

// hashField is where the transformed Secret keeps the key's hash (the key is dropped).
const hashField = "sha256"

// Tenant is who a request comes from.
type Tenant struct {
	Name string
	// Limits is the tenant's token budget (zero: unlimited).
	Limits ratelimit.Limits
}

// Keys maps key hashes to tenants. The zero value holds no key; Replace loads a set.
type Keys struct {
	mu      sync.RWMutex
	byHash  map[[sha256.Size]byte]string
	tenants map[string]Tenant
}

// Hash is the SHA-256 of a key, as Keys holds it.
func Hash(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// Strip is the informer's transform: the Secret as the cache keeps it, with the key
// replaced by its hash and every other data field dropped. Objects that are not Secrets
// (a deletion tombstone) pass unchanged.
func Strip(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	out := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
		Labels: s.Labels, Annotations: s.Annotations,
	}}
	// Surrounding white space is not part of a key: a file made with echo ends in a newline.
	if key := bytes.TrimSpace(s.Data[KeyField]); len(key) > 0 {
		h := sha256.Sum256(key)
		out.Data = map[string][]byte{hashField: h[:]}
	} else if h, ok := s.Data[hashField]; ok && len(s.Data) == 1 {
		// Already stripped: client-go may hand an object to the transform more than once.
		out.Data = map[string][]byte{hashField: h}
	}
	return out, nil
}

// Problem is a Secret that was not loaded, and why.
type Problem struct {
	Secret string // namespace/name
	Reason string
}

// Replace loads the key Secrets (transformed by Strip) in place of those held. A Secret
// without a key, without a tenant or with a bad limit annotation is skipped and reported;
// a key in two Secrets of different tenants is refused in both, since neither tenant can
// be trusted to be the caller. A tenant's limits are the strictest its Secrets write.
func (k *Keys) Replace(secrets []*corev1.Secret) []Problem {
	sort.Slice(secrets, func(i, j int) bool {
		return secrets[i].Namespace+"/"+secrets[i].Name < secrets[j].Namespace+"/"+secrets[j].Name
	})
	byHash := map[[sha256.Size]byte]string{}
	tenants := map[string]Tenant{}
	clash := map[[sha256.Size]byte]bool{}
	var problems []Problem
	for _, s := range secrets {
		name := s.Namespace + "/" + s.Name
		t := s.Labels[TenantLabel]
		var h [sha256.Size]byte
		switch {
		case t == "":
			problems = append(problems, Problem{name, "label " + TenantLabel + " is missing or empty: it names the key's tenant"})
			continue
		case len(s.Data[hashField]) != sha256.Size:
			problems = append(problems, Problem{name, "data field " + KeyField + " is missing or empty"})
			continue
		}
		copy(h[:], s.Data[hashField])
		l, err := LimitsFrom(s.Annotations)
		if err != nil {
			problems = append(problems, Problem{name, err.Error()})
			continue
		}
		if prev, ok := byHash[h]; ok && prev != t {
			clash[h] = true
			problems = append(problems, Problem{name, fmt.Sprintf("its key is also a key of tenant %q; refused for both", prev)})
		}
		byHash[h] = t
		cur, seen := tenants[t]
		if !seen {
			tenants[t] = Tenant{Name: t, Limits: l}
			continue
		}
		cur.Limits = strictest(cur.Limits, l)
		tenants[t] = cur
	}
	for h := range clash {
		delete(byHash, h)
	}
	k.mu.Lock()
	k.byHash, k.tenants = byHash, tenants
	k.mu.Unlock()
	return problems
}

// Len is how many keys are loaded.
func (k *Keys) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.byHash)
}

// Lookup is the tenant of key, if it is a loaded key. The key is hashed first and the map
// compares hashes: how long a comparison takes can tell a caller how many leading bytes of
// a stored key's SHA-256 its own key's SHA-256 shares, which does not help find a key (that
// is a preimage of the hash), so the lookup is as good as a constant-time compare.
func (k *Keys) Lookup(key string) (Tenant, bool) {
	h := Hash(key)
	k.mu.RLock()
	defer k.mu.RUnlock()
	t, ok := k.byHash[h]
	if !ok {
		return Tenant{}, false
	}
	return k.tenants[t], true
}

// Presented is the API key a request carries: "Authorization: Bearer <key>", or, as
// Anthropic's clients send it, "x-api-key" when anthropic is set (the Messages API).
// found is false when it carries none.
func Presented(h http.Header, anthropic bool) (key string, found bool) {
	if a := h.Get("Authorization"); a != "" {
		scheme, v, ok := strings.Cut(a, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), true
		}
	}
	if anthropic {
		if v := strings.TrimSpace(h.Get("X-Api-Key")); v != "" {
			return v, true
		}
	}
	return "", false
}

// LimitsFrom reads a tenant's rate limit from a Secret's annotations; none gives the zero
// (unlimited) Limits.
func LimitsFrom(ann map[string]string) (ratelimit.Limits, error) {
	rl := &v1alpha1.RateLimit{Unit: v1alpha1.RateLimitUnit(ann[UnitAnnotation])}
	any := rl.Unit != ""
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{InputTokensAnnotation, &rl.InputTokensPerUnit}, {OutputTokensAnnotation, &rl.OutputTokensPerUnit}} {
		v, ok := ann[f.name]
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil || n == 0 {
			return ratelimit.Limits{}, fmt.Errorf("annotation %s: %q is not a whole number of tokens of at least 1", f.name, v)
		}
		u := uint32(n)
		*f.dst, any = &u, true
	}
	if !any {
		return ratelimit.Limits{}, nil
	}
	l, err := ratelimit.LimitsFrom(rl)
	if err != nil {
		return ratelimit.Limits{}, fmt.Errorf("annotation %s: %v", UnitAnnotation, err)
	}
	return l, nil
}

// strictest is the lower of two budgets, per direction (0 is unlimited), over a common unit.
func strictest(a, b ratelimit.Limits) ratelimit.Limits {
	if a.Unlimited() {
		return b
	}
	if b.Unlimited() {
		return a
	}
	unit := min(a.Unit, b.Unit)
	scale := func(n int64, from ratelimit.Limits) int64 {
		if n <= 0 {
			return 0
		}
		return max(1, n*int64(unit)/int64(from.Unit))
	}
	pick := func(x, y int64) int64 {
		switch {
		case x == 0:
			return y
		case y == 0:
			return x
		}
		return min(x, y)
	}
	return ratelimit.Limits{
		InputPerUnit:  pick(scale(a.InputPerUnit, a), scale(b.InputPerUnit, b)),
		OutputPerUnit: pick(scale(a.OutputPerUnit, a), scale(b.OutputPerUnit, b)),
		Unit:          unit,
	}
}
