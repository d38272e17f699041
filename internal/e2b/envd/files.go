package envd

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/errdefs"
)

// envd's HTTP /files: GET downloads the file at ?path=, POST uploads one
// (a raw application/octet-stream body to ?path=, gzip or not) or several
// (multipart/form-data, each part named "file" and its filename its path
// unless ?path= names one) and answers what it wrote. Each acts as the
// user ?username= names (what a signed URL signs), else its basic auth's
// (fileUser): E2B's default "user" is the sandbox user, so an upload
// cannot write where that user could not (/etc); "root" asks for root.

// writeInfo is one entry of an upload's answer, as envd sends it.
type writeInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeader starts the headers of an upload's file metadata (envd
// 0.6.2): X-Metadata-<key>: <value> is the file's metadata key, its name
// lowercased, as envd keeps it (a header's name has no case).
const metadataHeader = "X-Metadata-"

// uploadMetadata is the metadata r's headers give every file it uploads,
// nil for none; a header given twice is refused, as the value kept would
// be one of them. The agent checks keys and values (printable, 4 KiB in
// all) before writing anything.
func uploadMetadata(r *http.Request) (map[string]string, error) {
	var md map[string]string
	for name, vals := range r.Header {
		key, ok := strings.CutPrefix(name, metadataHeader)
		if !ok {
			continue
		}
		key = strings.ToLower(key)
		if len(vals) != 1 {
			return nil, fmt.Errorf("invalid metadata: %s%s is given %d times; want it once", metadataHeader, key, len(vals))
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vals[0]
	}
	return md, nil
}

// envdError is envd's error body.
type envdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	api.WriteJSON(w, status, envdError{Code: status, Message: msg})
}

// httpFail answers err with the status envd would: the SDKs map 400, 401,
// 404, 429, 502 (the sandbox gone: "was not found" in the message) and
// 507.
func (h *handler) httpFail(w http.ResponseWriter, s *session, err error) {
	if stop := s.stopped(); stop != nil {
		err = stop
	}
	kind, msg := errdefs.Classify(err)
	status := kind.Status
	switch {
	case errors.Is(err, errGoneSandbox), errors.Is(err, errdefs.ErrGone), errors.Is(err, errdefs.ErrBadGateway):
		status = http.StatusBadGateway
	case errors.Is(err, errUploadTooLarge):
		status = http.StatusRequestEntityTooLarge
	case errors.Is(err, errdefs.ErrDiskFull), errors.Is(err, errdefs.ErrTooLarge):
		// The agent's too_large is the sandbox's disk full or a file over
		// its own bound: E2B's 507, NotEnoughSpaceException.
		status = http.StatusInsufficientStorage
	}
	if msg == "" {
		msg = http.StatusText(status)
		h.log.Warn("envd /files call failed", "err", err)
	}
	writeError(w, status, msg)
}

// errUploadTooLarge marks an upload over the server's bound.
var errUploadTooLarge = fmt.Errorf("upload over --max-file-mb: %w", errdefs.ErrTooLarge)

// tooLarge is the error of an upload over the server's bound.
func (h *handler) tooLarge() error {
	return &errdefs.Error{Kind: errUploadTooLarge, Msg: fmt.Sprintf("the upload is larger than this server's bound of %d MiB (--max-file-mb)", h.maxFile>>20)}
}

func (h *handler) download(w http.ResponseWriter, r *http.Request) {
	s, err := h.open(r.Context())
	if err != nil {
		h.httpFail(w, nil, err)
		return
	}
	defer s.release()
	p, as := r.URL.Query().Get("path"), fileUser(r)
	e, err := s.agent.Stat(s.ctx, as, p)
	if err != nil {
		h.httpFail(w, s, err)
		return
	}
	body, err := s.agent.ReadFile(s.ctx, as, p)
	if err != nil {
		h.httpFail(w, s, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": e.Name}))
	// No Content-Length from the stat: a /proc file stats as 0 bytes and a
	// file may grow as it is read; the body is the file to its real end
	// (net/http gives a short one its exact length, a long one chunked).
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil && r.Context().Err() == nil {
		h.log.Debug("sending a file", "sandbox_id", s.sandbox, "err", err)
	}
}

func (h *handler) upload(w http.ResponseWriter, r *http.Request) {
	s, err := h.open(r.Context())
	if err != nil {
		h.httpFail(w, nil, err)
		return
	}
	defer s.release()
	var raw io.Reader = r.Body
	switch ce := r.Header.Get("Content-Encoding"); ce {
	case "", "identity":
		if h.maxFile > 0 && r.ContentLength > h.maxFile {
			h.httpFail(w, s, h.tooLarge())
			return
		}
	case "gzip":
		// The SDKs' gzip=True (envd 0.5.7): the bound counts what is
		// written, not what came.
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("reading the gzip body: %v", err))
			return
		}
		defer zr.Close()
		raw = zr
	default:
		writeError(w, http.StatusBadRequest, "Content-Encoding "+ce+" is not supported: upload as is or with gzip")
		return
	}
	md, err := uploadMetadata(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	body := &boundedBody{r: raw, max: h.maxFile}
	path, as := r.URL.Query().Get("path"), fileUser(r)
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []writeInfo
	put := func(p string, content io.Reader) bool {
		e, err := s.agent.WriteFile(s.ctx, as, p, md, content)
		if body.over {
			err = h.tooLarge()
		}
		if err != nil {
			h.httpFail(w, s, err)
			return false
		}
		written = append(written, writeInfo{Name: e.Name, Type: "file", Path: e.Path, Metadata: e.Metadata})
		return true
	}
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if body.over {
				h.httpFail(w, s, h.tooLarge())
				return
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("reading the multipart body: %v", err))
				return
			}
			if part.FormName() != "file" {
				continue
			}
			p := path
			if p == "" {
				// The SDKs put the path in the filename; Go's FileName
				// would keep only its last element.
				_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				p = dp["filename"]
			}
			if p == "" {
				writeError(w, http.StatusBadRequest, "a file part names no path (its filename), and ?path= is not set")
				return
			}
			if seen[p] {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("you cannot upload multiple files to the same path '%s' in one upload request", p))
				return
			}
			seen[p] = true
			if !put(p, part) {
				return
			}
		}
		if len(written) == 0 {
			writeError(w, http.StatusBadRequest, "the multipart body holds no part named file")
			return
		}
	default:
		if path == "" {
			writeError(w, http.StatusBadRequest, "path: an octet-stream upload needs ?path=")
			return
		}
		if !put(path, body) {
			return
		}
	}
	api.WriteJSON(w, http.StatusOK, written)
}

// boundedBody fails an upload's read once more than max bytes came (max
// 0: no bound), and says so in over; the agent then drops what it got.
type boundedBody struct {
	r         io.Reader
	max, read int64
	over      bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += int64(n)
	if b.max > 0 && b.read > b.max {
		b.over = true
		return n, errUploadTooLarge
	}
	return n, err
}
