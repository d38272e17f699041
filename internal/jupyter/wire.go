package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// protocolVersion is the Jupyter messaging protocol version we speak.
const protocolVersion = "5.3"

// delimiter separates ZeroMQ routing identities from the signed message.
var delimiter = []byte("<IDS|MSG>")

// header is a Jupyter message header.
type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is one received Jupyter message. Content stays raw: each handler
// decodes only what it needs.
type message struct {
	Header   header
	ParentID string // parent_header.msg_id, "" when there is no parent
	Content  json.RawMessage
}

// signer signs and verifies messages with the connection's HMAC key.
type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	mac := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		mac.Write(p)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode builds the frames of a message for a DEALER socket (no routing
// identities: the kernel's ROUTER adds its own).
func (s signer) encode(session, msgType string, content any) (msgID string, frames [][]byte, err error) {
	msgID = newID()
	h, err := json.Marshal(header{
		MsgID:    msgID,
		Session:  session,
		Username: "lizard",
		Date:     time.Now().UTC().Format(time.RFC3339Nano),
		MsgType:  msgType,
		Version:  protocolVersion,
	})
	if err != nil {
		return "", nil, fmt.Errorf("encoding header: %w", err)
	}
	c, err := json.Marshal(content)
	if err != nil {
		return "", nil, fmt.Errorf("encoding %s content: %w", msgType, err)
	}
	parent, metadata := []byte("{}"), []byte("{}")
	sig := s.sign(h, parent, metadata, c)
	return msgID, [][]byte{delimiter, sig, h, parent, metadata, c}, nil
}

var errBadSignature = errors.New("bad message signature")

// decode parses the frames of a received message and verifies its
// signature. Frames before the delimiter (routing identities or the iopub
// topic) are ignored.
func (s signer) decode(frames [][]byte) (*message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return nil, fmt.Errorf("malformed message: %d frames, delimiter at %d", len(frames), i)
	}
	sig, h, parent, metadata, content := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	if !hmac.Equal(sig, s.sign(h, parent, metadata, content)) {
		return nil, errBadSignature
	}
	m := &message{Content: json.RawMessage(content)}
	if err := json.Unmarshal(h, &m.Header); err != nil {
		return nil, fmt.Errorf("decoding header: %w", err)
	}
	var p struct {
		MsgID string `json:"msg_id"`
	}
	if err := json.Unmarshal(parent, &p); err != nil {
		return nil, fmt.Errorf("decoding parent header: %w", err)
	}
	m.ParentID = p.MsgID
	return m, nil
}

// newID returns a random UUID-like identifier (version 4 layout).
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
