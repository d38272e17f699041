// The harness of a Java context (internal/agent/repl.go): one JVM per
// context evaluates each call's code with the JDK's JShell API, so
// declarations persist between calls as in jshell and E2B's Java kernel.
// JShell runs the code in this JVM (the "local" execution engine): a second
// JVM (JShell's default) would double the memory and the start time.
//
// Calls come as JSON lines on fd 3: {"code": "...", "envs": {...}}; events
// go as JSON lines on fd 4: stdout, stderr, result (the last expression's
// value), error, done. SIGINT stops the running call (a timeout), keeping
// the context's state. A call's envs are system properties for the call,
// as in E2B's Java kernel; the context's environment is too.
//
// Compiled by the interpreter template's build (setup.sh, stage kernels).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import jdk.jshell.*;

public final class LizardJShell {
    private static PrintStream events;

    public static void main(String[] args) throws Exception {
        // The pipes themselves, not /dev/fd/N opened again: a pipe the agent
        // (root) made is root's, and the sandbox user may not open it by name.
        events = new PrintStream(new FileOutputStream(descriptor(4)), false, StandardCharsets.UTF_8);
        BufferedReader calls = new BufferedReader(new InputStreamReader(new FileInputStream(descriptor(3)), StandardCharsets.UTF_8));
        for (Map.Entry<String, String> e : System.getenv().entrySet()) {
            if (System.getProperty(e.getKey()) == null) System.setProperty(e.getKey(), e.getValue());
        }
        // Subclasses ({}): PrintStream's own println writes the text and its
        // line end at once, a subclass's as two writes, which E2B's kernel
        // streams as two pieces of output.
        System.setOut(new PrintStream(new EventStream("stdout"), true, StandardCharsets.UTF_8) {});
        System.setErr(new PrintStream(new EventStream("stderr"), true, StandardCharsets.UTF_8) {});
        JShell shell = JShell.builder().executionEngine("local").build();
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> shell.stop());
        // The first evaluation loads javac: done here, not in the first call.
        shell.eval("0;");
        send("ready", null);
        for (String line; (line = calls.readLine()) != null; ) {
            Object call = new Json(line).value();
            if (!(call instanceof Map<?, ?> m)) continue;
            Map<String, String> saved = new HashMap<>();
            if (m.get("envs") instanceof Map<?, ?> envs) {
                for (Map.Entry<?, ?> e : envs.entrySet()) {
                    String k = String.valueOf(e.getKey());
                    saved.put(k, System.getProperty(k));
                    System.setProperty(k, String.valueOf(e.getValue()));
                }
            }
            try {
                run(shell, String.valueOf(m.get("code")));
            } catch (Throwable t) {
                error(t.getClass().getSimpleName(), String.valueOf(t.getMessage()), trace(t));
            } finally {
                for (Map.Entry<String, String> e : saved.entrySet()) {
                    if (e.getValue() == null) System.clearProperty(e.getKey());
                    else System.setProperty(e.getKey(), e.getValue());
                }
                System.out.flush();
                System.err.flush();
                send("done", null);
            }
        }
        System.exit(0); // the calls' end: JShell's threads would keep the JVM
    }

    // descriptor is file descriptor n, which Java has no public way to name
    // (java --add-opens=java.base/java.io=ALL-UNNAMED lets this set it).
    static FileDescriptor descriptor(int n) throws ReflectiveOperationException {
        FileDescriptor d = new FileDescriptor();
        java.lang.reflect.Field f = FileDescriptor.class.getDeclaredField("fd");
        f.setAccessible(true);
        f.setInt(d, n);
        return d;
    }

    // run evaluates code snippet by snippet; the value of the last one, when
    // it is an expression, is the call's result. The first failing snippet
    // ends the call, as an exception ends a Python cell.
    static void run(JShell shell, String code) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = code;
        String value = null;
        while (!rest.isBlank()) {
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
            String source = ci.source();
            if (ci.completeness() == SourceCodeAnalysis.Completeness.EMPTY) break;
            if (source == null || !ci.completeness().isComplete()) {
                // Incomplete (an unclosed brace): let JShell say what is wrong.
                source = rest;
                rest = "";
            } else {
                rest = ci.remaining();
            }
            value = null;
            for (SnippetEvent ev : shell.eval(source)) {
                if (ev.causeSnippet() != null) continue; // an update of another snippet
                Snippet s = ev.snippet();
                if (ev.exception() != null) {
                    failed(ev.exception());
                    return;
                }
                if (ev.status() == Snippet.Status.REJECTED) {
                    StringBuilder msg = new StringBuilder();
                    shell.diagnostics(s).forEach(d -> {
                        if (d.isError()) {
                            if (msg.length() > 0) msg.append('\n');
                            msg.append(d.getMessage(Locale.ROOT));
                        }
                    });
                    error("CompilationError", msg.toString(), s.source());
                    return;
                }
                if (ev.value() != null && (s.kind() == Snippet.Kind.EXPRESSION
                        || s.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND)) {
                    value = ev.value();
                }
            }
        }
        if (value != null) send("result", value);
    }

    static void failed(JShellException e) {
        String name = e.getClass().getSimpleName();
        if (e instanceof EvalException ee) {
            name = ee.getExceptionClassName();
            name = name.substring(name.lastIndexOf('.') + 1);
        }
        // The stack as the code's exception would print it, not as JShell's
        // wrapper: java.lang.ArithmeticException: / by zero, then its frames.
        String tb = trace(e);
        if (e instanceof EvalException ee && tb.startsWith(EvalException.class.getName())) {
            tb = ee.getExceptionClassName() + tb.substring(EvalException.class.getName().length());
        }
        error(name, String.valueOf(e.getMessage()), tb);
    }

    static String trace(Throwable t) {
        StringWriter w = new StringWriter();
        t.printStackTrace(new PrintWriter(w));
        return w.toString().stripTrailing();
    }

    static void error(String name, String value, String traceback) {
        synchronized (LizardJShell.class) {
            events.print("{\"t\":\"error\",\"name\":" + quote(name) + ",\"value\":" + quote(value)
                    + ",\"traceback\":" + quote(traceback) + "}\n");
            events.flush();
        }
    }

    static void send(String t, String text) {
        synchronized (LizardJShell.class) {
            events.print("{\"t\":\"" + t + "\"" + (text == null ? "" : ",\"text\":" + quote(text)) + "}\n");
            events.flush();
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(s, i)) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
                }
            }
        }
        return b.append('"').toString();
    }

    static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    // EventStream turns what code prints into stdout or stderr events, one
    // per write, as E2B's Java kernel streams them (println is the text,
    // then its line end). Bytes of a character cut between writes wait for
    // the rest.
    static final class EventStream extends OutputStream {
        private final String kind;
        private final ByteArrayOutputStream pending = new ByteArrayOutputStream();

        EventStream(String kind) { this.kind = kind; }

        @Override public void write(int b) { write(new byte[] {(byte) b}, 0, 1); }

        @Override public synchronized void write(byte[] b, int off, int len) {
            pending.write(b, off, len);
            byte[] all = pending.toByteArray();
            int end = all.length;
            // Keep an incomplete UTF-8 sequence at the end for the next write.
            int i = end - 1, back = 0;
            while (i >= 0 && back < 3 && (all[i] & 0xC0) == 0x80) { i--; back++; }
            if (i >= 0 && (all[i] & 0x80) != 0) {
                int need = (all[i] & 0xE0) == 0xC0 ? 2 : (all[i] & 0xF0) == 0xE0 ? 3 : (all[i] & 0xF8) == 0xF0 ? 4 : 1;
                if (end - i < need) end = i;
            }
            if (end == 0) return;
            send(kind, new String(all, 0, end, StandardCharsets.UTF_8));
            pending.reset();
            pending.write(all, end, all.length - end);
        }
    }

    // Json reads the calls: objects, strings, numbers, true, false, null.
    static final class Json {
        private final String s;
        private int i;

        Json(String s) { this.s = s; }

        Object value() {
            skip();
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                skip();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    skip();
                    String k = string();
                    skip();
                    i++; // ':'
                    m.put(k, value());
                    skip();
                    if (s.charAt(i++) == '}') return m;
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++;
                skip();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) {
                    l.add(value());
                    skip();
                    if (s.charAt(i++) == ']') return l;
                }
            }
            if (c == '"') return string();
            int start = i;
            while (i < s.length() && ",}] \t\r\n".indexOf(s.charAt(i)) < 0) i++;
            String word = s.substring(start, i);
            return switch (word) {
                case "true" -> Boolean.TRUE;
                case "false" -> Boolean.FALSE;
                case "null" -> null;
                default -> word;
            };
        }

        private String string() {
            StringBuilder b = new StringBuilder();
            i++; // opening quote
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 't' -> b.append('\t');
                    case 'r' -> b.append('\r');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> { b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; }
                    default -> b.append(e);
                }
            }
        }

        private void skip() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
        }
    }
}
