package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/store"
)

// rateTakeSQL is one atomic statement: refill the bucket for the time since
// its last take, grant what was asked (whole tokens, no more than it holds)
// and keep the rest — an upsert, so concurrent takers on any replica queue
// on the row and a new key starts full. In the SET clause every column
// reference reads the row before the update. Written with the dialect's
// names for scalar min/max and floor.
var rateTakeSQL texts[string] // dialect name -> query

func rateTakeQuery(d *Dialect) string {
	return rateTakeSQL.get(d.Name, buildRateTake)
}

func buildRateTake(dialect string) string {
	least, greatest, floor := "MIN", "MAX", "CAST(%s AS INTEGER)"
	if dialect == "postgres" {
		least, greatest, floor = "LEAST", "GREATEST", "FLOOR(%s)"
	}
	// :burst, :want, :now, :rate are expanded into positional placeholders.
	refilled := least + `(:burst, b.tokens + ` + greatest + `(0, :now - b.updated_at) * :rate / 1000.0)`
	granted := greatest + `(0, ` + least + `(:want, ` + fmt.Sprintf(floor, refilled) + `))`
	fresh := greatest + `(0, ` + least + `(:want, ` + fmt.Sprintf(floor, ":burst") + `))`
	q := `INSERT INTO rate_buckets AS b (bucket_key, tokens, updated_at, granted) VALUES (:key, :burst - ` + fresh + `, :now, ` + fresh + `)
		ON CONFLICT (bucket_key) DO UPDATE SET
			granted = ` + granted + `,
			tokens = ` + refilled + ` - ` + granted + `,
			updated_at = ` + greatest + `(b.updated_at, :now)
		RETURNING granted, tokens`
	return q
}

// expandNamed turns :name markers into "?" and the matching argument list,
// each marker cast to its type so PostgreSQL does not guess from context.
func expandNamed(query string, vals map[string]any, casts map[string]string) (string, []any) {
	var b strings.Builder
	var args []any
	for i := 0; i < len(query); i++ {
		if query[i] != ':' {
			b.WriteByte(query[i])
			continue
		}
		j := i + 1
		for j < len(query) && (query[j] == '_' || query[j] >= 'a' && query[j] <= 'z') {
			j++
		}
		name := query[i+1 : j]
		v, ok := vals[name]
		if !ok {
			b.WriteByte(':')
			continue
		}
		b.WriteString(`CAST(? AS ` + casts[name] + `)`)
		args = append(args, v)
		i = j - 1
	}
	return b.String(), args
}

var rateCasts = map[string]string{"key": "TEXT", "burst": "DOUBLE PRECISION", "want": "DOUBLE PRECISION", "rate": "DOUBLE PRECISION", "now": "BIGINT"}

// RateTake takes up to p.Want tokens from the shared bucket p.Key.
func (q *queries) RateTake(ctx context.Context, p *store.RateTakeParams) (*store.RateTaken, error) {
	query, args := expandNamed(rateTakeQuery(q.d), map[string]any{"key": p.Key, "burst": p.Burst, "want": p.Want, "rate": p.Rate, "now": p.At}, rateCasts)
	var out store.RateTaken
	if err := q.queryRow(ctx, true, query, args...).Scan(&out.Granted, &out.Tokens); err != nil {
		return nil, fmt.Errorf("rate take %s: %w", p.Key, mapErr(q.d, err))
	}
	return &out, nil
}

// RateBucketsPrune deletes buckets untouched since before.
func (q *queries) RateBucketsPrune(ctx context.Context, before int64) (int, error) {
	res, err := q.exec(ctx, `DELETE FROM rate_buckets WHERE updated_at < ?`, before)
	if err != nil {
		return 0, fmt.Errorf("prune rate buckets: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
