package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"
)

func sign(secret string, t int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", t, body)
	return fmt.Sprintf("t=%d,v1=%s", t, hex.EncodeToString(m.Sum(nil)))
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_774_017_300, 0)
	body := `{"id":"t1:3:TaskAvailable","type":"TaskAvailable","event":{"type":"release","task_id":"t1"}}`
	good := sign("s3cret", now.Unix(), body)
	tests := []struct {
		name, secret, header, body string
		want                       error
	}{
		{"valid", "s3cret", good, body, nil},
		{"valid, a minute old", "s3cret", sign("s3cret", now.Unix()-60, body), body, nil},
		{"rotating: the second v1 matches", "s3cret", good[:len("t=1774017300,")] + "v1=" + hex.EncodeToString(make([]byte, 32)) + "," + good[len("t=1774017300,"):], body, nil},
		{"forged: another secret", "s3cret", sign("guess", now.Unix(), body), body, ErrWebhookSignature},
		{"forged: body changed", "s3cret", good, body + " ", ErrWebhookSignature},
		{"forged: time changed", "s3cret", fmt.Sprintf("t=%d", now.Unix()-1) + good[len("t=1774017300"):], body, ErrWebhookSignature},
		{"stale: signed ten minutes ago", "s3cret", sign("s3cret", now.Unix()-600, body), body, ErrWebhookStale},
		{"from the future", "s3cret", sign("s3cret", now.Unix()+600, body), body, ErrWebhookStale},
		{"no header", "s3cret", "", body, ErrWebhookSignature},
		{"no v1", "s3cret", fmt.Sprintf("t=%d", now.Unix()), body, ErrWebhookSignature},
		{"no t", "s3cret", good[len("t=1774017300,"):], body, ErrWebhookSignature},
		{"garbage", "s3cret", "t=x,v1=zz", body, ErrWebhookSignature},
		{"no secret configured", "", sign("", now.Unix(), body), body, ErrWebhookSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyWebhook(tt.secret, tt.header, []byte(tt.body), 5*time.Minute, now)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	if err := VerifyWebhook("s3cret", sign("s3cret", time.Now().Unix(), body), []byte(body), 0); err != nil {
		t.Fatalf("a fresh signature with the default tolerance: %v", err)
	}
}
