package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cirello.io/dynamolock/v2"

	"github.com/checkout-dev/checkout/lease"
)

// OpCost is the DynamoDB requests of one operation.
type OpCost struct {
	Op string
	// Ours and Peer are the requests counted on the wire; -1: not offered.
	Ours, Peer int
	// OursOnDynamoDB is Ours without the reads the store makes only because
	// the emulator ignores ReturnValuesOnConditionCheckFailure.
	OursOnDynamoDB   int
	OursOps, PeerOps Ops
	Note             string
}

// Requests measures the requests per operation of both systems.
func Requests(ctx context.Context, endpoint string) ([]OpCost, error) {
	clk := NewClock()
	o, err := NewOurs(ctx, endpoint, clk.Now)
	if err != nil {
		return nil, err
	}
	p, err := NewPeer(ctx, endpoint, time.Minute)
	if err != nil {
		return nil, err
	}
	if err := o.Prepare(ctx, []string{"t", "u"}); err != nil {
		return nil, err
	}
	var out []OpCost
	ours := func(name string, fn func() error) (Ops, int, error) {
		var ops Ops
		var fb int64
		err := o.Quiet(ctx, func() error {
			fb = o.Store.FallbackReads()
			if err := fn(); err != nil {
				return err
			}
			ops = o.Count.Take()
			return nil
		})
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		return ops, ops.Total() - int(o.Store.FallbackReads()-fb), nil
	}
	peer := func(name string, fn func() error) (Ops, error) {
		p.Count.Take()
		if err := fn(); err != nil {
			return nil, fmt.Errorf("dynamolock %s: %w", name, err)
		}
		return p.Count.Take(), nil
	}
	add := func(op string, oo Ops, oDDB int, po Ops, note string) {
		c := OpCost{Op: op, Ours: -1, Peer: -1, OursOnDynamoDB: oDDB, OursOps: oo, PeerOps: po, Note: note}
		if oo != nil {
			c.Ours = oo.Total()
		}
		if po != nil {
			c.Peer = po.Total()
		}
		out = append(out, c)
	}

	// Heartbeat: ours is one per agent, whatever it holds; dynamolock's
	// client refreshes each held lock, one request per lock per period.
	// Measured is the periodic heartbeat of an agent that is alive; its
	// first heartbeat (3 requests: README) is sent before.
	if _, err := o.Store.Heartbeat(ctx, "holder", time.Hour); err != nil {
		return nil, err
	}
	hbOps, hbDDB, err := ours("heartbeat", func() error { _, err := o.Store.Heartbeat(ctx, "holder", time.Hour); return err })
	if err != nil {
		return nil, err
	}
	holder, err := p.NewClient(1, time.Minute, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = holder.Close() }()
	other, err := p.NewClient(2, time.Minute, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = other.Close() }()

	var held lease.Checkout
	coOps, coDDB, err := ours("checkout", func() error {
		var err error
		held, err = o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "holder", Timeout: time.Minute})
		return err
	})
	if err != nil {
		return nil, err
	}
	var lock *dynamolock.Lock
	pco, err := peer("acquire", func() error {
		var err error
		lock, err = holder.AcquireLockWithContext(ctx, "t", dynamolock.FailIfLocked())
		return err
	})
	if err != nil {
		return nil, err
	}
	add("successful checkout / acquire", coOps, coDDB, pco, "")

	cfOps, cfDDB, err := ours("conflict", func() error {
		_, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "other"})
		if errors.Is(err, lease.ErrCheckedOut) {
			return nil
		}
		return fmt.Errorf("want conflict, got %w", err)
	})
	if err != nil {
		return nil, err
	}
	pcf, err := peer("conflict", func() error {
		_, err := other.AcquireLockWithContext(ctx, "t", dynamolock.FailIfLocked())
		var ng *dynamolock.LockNotGrantedError
		if errors.As(err, &ng) {
			return nil
		}
		return fmt.Errorf("want not granted, got %w", err)
	})
	if err != nil {
		return nil, err
	}
	add("conflict (task held)", cfOps, cfDDB, pcf, "ours: the failed write + the holder's heartbeat (holder is watched)")

	rnOps, rnDDB, err := ours("renew", func() error {
		_, err := o.Store.Renew(ctx, lease.RenewParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence})
		return err
	})
	if err != nil {
		return nil, err
	}
	prn, err := peer("heartbeat", func() error { return holder.SendHeartbeatWithContext(ctx, lock) })
	if err != nil {
		return nil, err
	}
	add("renew (extend one lease)", rnOps, rnDDB, prn, "ours: reads the caller's heartbeat, so a dead holder cannot extend")
	add("heartbeat (agent alive)", hbOps, hbDDB, prn, "ours: one per agent; dynamolock: one per held lock per period")

	rlOps, rlDDB, err := ours("release", func() error {
		_, err := o.Store.Release(ctx, lease.ReleaseParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence})
		return err
	})
	if err != nil {
		return nil, err
	}
	prl, err := peer("release", func() error {
		ok, err := holder.ReleaseLockWithContext(ctx, lock)
		if err == nil && !ok {
			err = errors.New("not released")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	add("release", rlOps, rlDDB, prl, "ours: the write; its audit event and watchers' messages come from the stream function")

	// Complete: ours only.
	if _, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: "u", AgentID: "holder", Timeout: time.Minute}); err != nil {
		return nil, err
	}
	cmOps, cmDDB, err := ours("complete", func() error {
		_, err := o.Store.Complete(ctx, lease.CompleteParams{TaskID: "u", AgentID: "holder"})
		return err
	})
	if err != nil {
		return nil, err
	}
	add("complete", cmOps, cmDDB, nil, "dynamolock has no task state")

	// Status: ours GetTask/LockStatus; dynamolock Get.
	stOps, stDDB, err := ours("lock status", func() error { _, err := o.Store.LockStatus(ctx, "t"); return err })
	if err != nil {
		return nil, err
	}
	pst, err := peer("get", func() error { _, err := other.GetWithContext(ctx, "t"); return err })
	if err != nil {
		return nil, err
	}
	add("lock status", stOps, stDDB, pst, "")
	return out, nil
}
