package webhook

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DeadLetterFile is the file name the local server keeps dead letters in,
// under its data directory.
const DeadLetterFile = "webhook-dead-letters.jsonl"

// FileDeadLetters appends each dead letter as one JSON line to a file,
// synced before Put returns, so that what failed survives a crash and can
// be read, and sent again, with ordinary tools:
//
//	jq -c . webhook-dead-letters.jsonl
//
// The file holds each notice's dead letter once per URL, as the AWS table
// (keyed by event id and URL) does: a dead letter put again, when its
// batch of notices is handed again, is not appended (the first one put is
// kept, where the table keeps the last). The ids are read from the file at
// the first Put, and remembered as they are appended, so a Put reads
// nothing. A file cleared while the server runs is not read again: a
// notice dead-lettered before it was cleared is not written again.
type FileDeadLetters struct {
	Path string
	mu   sync.Mutex
	// written holds the dead letters in the file at writtenPath.
	written     map[deadLetterKey]bool
	writtenPath string
	// torn says the file's last line has no newline (an append a crash
	// cut short): the next dead letter starts a line of its own.
	torn bool
}

// deadLetterKey names one dead letter: the notice, and the URL it failed
// to reach.
type deadLetterKey struct{ EventID, URL string }

// Put appends d to the file, unless the file holds d's notice for d's URL
// already.
func (f *FileDeadLetters) Put(_ context.Context, d DeadLetter) error {
	line, err := json.Marshal(d)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	if f.writtenPath != f.Path {
		written, err := deadLetterKeys(f.Path)
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		torn, err := tornTail(f.Path)
		if err != nil {
			return fmt.Errorf("dead letters: %w", err)
		}
		f.written, f.writtenPath, f.torn = written, f.Path, torn
	}
	key := deadLetterKey{d.EventID, d.URL}
	if f.written[key] {
		return nil
	}
	file, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("dead letters: %w", err)
	}
	if f.torn {
		line = append([]byte{'\n'}, line...)
	}
	_, err = file.Write(append(line, '\n'))
	if err == nil {
		err = file.Sync()
	}
	if err = errors.Join(err, file.Close()); err == nil {
		f.written[key] = true
		f.torn = false
	} else {
		f.writtenPath = "" // what the failed write left is read again
	}
	return err
}

// tornTail reports whether the file at path ends in a line without its
// newline (false if it does not exist or is empty).
func tornTail(path string) (bool, error) {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = file.Close() }() // only read
	st, err := file.Stat()
	if err != nil || st.Size() == 0 {
		return false, err
	}
	last := make([]byte, 1)
	if _, err := file.ReadAt(last, st.Size()-1); err != nil {
		return false, err
	}
	return last[0] != '\n', nil
}

// deadLetterKeys reads the keys of the dead letters in the file at path
// (none if it does not exist). A line that does not decode (one cut short
// by a crash) names none.
func deadLetterKeys(path string) (map[deadLetterKey]bool, error) {
	keys := map[deadLetterKey]bool{}
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }() // only read
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var k struct {
			EventID string `json:"event_id"`
			URL     string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &k) == nil {
			keys[deadLetterKey{k.EventID, k.URL}] = true
		}
	}
	return keys, sc.Err()
}

// ReadDeadLetters reads every dead letter of a file written by
// FileDeadLetters (none if the file does not exist).
func ReadDeadLetters(path string) ([]DeadLetter, error) {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }() // only read
	var out []DeadLetter
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var d DeadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// PutItemAPI is the DynamoDB call TableDeadLetters makes.
type PutItemAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// DeadLetterRetention is how long TableDeadLetters keeps a dead letter.
const DeadLetterRetention = 14 * 24 * time.Hour

// TableDeadLetters keeps dead letters in a DynamoDB table
// (schema.WebhookDeadLettersTable: event_id, url), as the stream function
// does in AWS, where it has no disk that lasts. A dead letter written again
// (its batch was handed again) replaces itself.
type TableDeadLetters struct {
	DB    PutItemAPI
	Table string
}

// Put writes d.
func (t TableDeadLetters) Put(ctx context.Context, d DeadLetter) error {
	item, err := attributevalue.MarshalMap(struct {
		EventID  string `dynamodbav:"event_id"`
		URL      string `dynamodbav:"url"`
		Type     string `dynamodbav:"type"`
		Body     string `dynamodbav:"body"`
		Attempts int    `dynamodbav:"attempts"`
		Error    string `dynamodbav:"error"`
		FailedAt string `dynamodbav:"failed_at"`
		TTL      int64  `dynamodbav:"ttl"`
	}{d.EventID, d.URL, d.Type, string(d.Body), d.Attempts, d.Error, d.FailedAt.Format(time.RFC3339Nano), d.FailedAt.Add(DeadLetterRetention).Unix()})
	if err != nil {
		return err
	}
	if _, err := t.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.Table, Item: item}); err != nil {
		return fmt.Errorf("dead letter %s: %w", d.EventID, err)
	}
	return nil
}
