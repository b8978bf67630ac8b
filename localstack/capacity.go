package localstack

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Units are DynamoDB capacity units: write units and read units (an
// eventually consistent read is half a unit).
type Units struct {
	Write float64
	Read  float64
}

// Add returns u + v.
func (u Units) Add(v Units) Units { return Units{u.Write + v.Write, u.Read + v.Read} }

// Sub returns u - v.
func (u Units) Sub(v Units) Units { return Units{u.Write - v.Write, u.Read - v.Read} }

// IsZero reports whether u counts nothing.
func (u Units) IsZero() bool { return u == Units{} }

// Partition names one partition-key value of a table, or of one of its
// global secondary indexes.
type Partition struct {
	Table string
	Index string // "" for the table itself
	Key   string // the partition-key value
}

// PartitionUnits is a partition and what it was billed.
type PartitionUnits struct {
	Partition
	Units
}

// Capacity is what the local DynamoDB's meter has counted: the units
// DynamoDB would bill, by the rules the shim cites (shim/meter.js), failed
// conditional writes included.
type Capacity struct {
	// Tables holds each table's own units, without its indexes'.
	Tables map[string]Units
	// Indexes holds each global secondary index's units, by IndexKey.
	Indexes map[string]Units
	// Partitions holds the units of each partition-key value of each table
	// and index.
	Partitions map[Partition]Units
}

// IndexKey is the key of table's index in Capacity.Indexes: "table/index".
func IndexKey(table, index string) string { return table + "/" + index }

// Total is the units of every table and index.
func (c Capacity) Total() Units {
	var u Units
	for _, v := range c.Tables {
		u = u.Add(v)
	}
	for _, v := range c.Indexes {
		u = u.Add(v)
	}
	return u
}

// Sub returns what c counted beyond prev (an earlier reading of the same
// tables); entries that did not change are left out.
func (c Capacity) Sub(prev Capacity) Capacity {
	return Capacity{
		Tables:     subMap(c.Tables, prev.Tables),
		Indexes:    subMap(c.Indexes, prev.Indexes),
		Partitions: subMap(c.Partitions, prev.Partitions),
	}
}

func subMap[K comparable](now, prev map[K]Units) map[K]Units {
	out := map[K]Units{}
	for k, v := range now {
		if d := v.Sub(prev[k]); !d.IsZero() {
			out[k] = d
		}
	}
	return out
}

// Busiest returns, for each table and each index with partitions, the
// partition-key value with the most write units (ties: the smallest key),
// ordered by table, then index ("" first).
func (c Capacity) Busiest() []PartitionUnits {
	best := map[[2]string]PartitionUnits{}
	for p, u := range c.Partitions {
		k := [2]string{p.Table, p.Index}
		b, ok := best[k]
		if !ok || u.Write > b.Write || (u.Write == b.Write && p.Key < b.Key) {
			best[k] = PartitionUnits{p, u}
		}
	}
	out := slices.Collect(maps.Values(best))
	slices.SortFunc(out, func(a, b PartitionUnits) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// ReadCapacity returns the meter's running totals for every table whose
// name starts with tablePrefix ("" for all), on the dynalite at endpoint.
// Many clients may share one server: totals are kept per table, and
// include every client's requests on those tables.
//
// It fails on any other DynamoDB-compatible server.
func ReadCapacity(ctx context.Context, endpoint, tablePrefix string) (Capacity, error) {
	body, err := json.Marshal(struct{ TablePrefix string }{tablePrefix})
	if err != nil {
		return Capacity{}, err
	}
	out, err := shimCall(ctx, endpoint, "ReadCapacity", body)
	if err != nil {
		return Capacity{}, err
	}
	var res struct {
		Tables []struct {
			TableName             string
			WriteUnits, ReadUnits float64
			Indexes               []struct {
				IndexName             string
				WriteUnits, ReadUnits float64
			}
			Partitions []struct {
				IndexName, Key        string
				WriteUnits, ReadUnits float64
			}
		}
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return Capacity{}, fmt.Errorf("localstack: ReadCapacity: %w", err)
	}
	c := Capacity{Tables: map[string]Units{}, Indexes: map[string]Units{}, Partitions: map[Partition]Units{}}
	for _, t := range res.Tables {
		c.Tables[t.TableName] = Units{t.WriteUnits, t.ReadUnits}
		for _, ix := range t.Indexes {
			c.Indexes[IndexKey(t.TableName, ix.IndexName)] = Units{ix.WriteUnits, ix.ReadUnits}
		}
		for _, p := range t.Partitions {
			c.Partitions[Partition{t.TableName, p.IndexName, p.Key}] = Units{p.WriteUnits, p.ReadUnits}
		}
	}
	return c, nil
}

// ResetCapacity sets the meter's totals of every table whose name starts
// with tablePrefix back to zero, on the dynalite at endpoint.
func ResetCapacity(ctx context.Context, endpoint, tablePrefix string) error {
	body, err := json.Marshal(struct{ TablePrefix string }{tablePrefix})
	if err != nil {
		return err
	}
	_, err = shimCall(ctx, endpoint, "ResetCapacity", body)
	return err
}
