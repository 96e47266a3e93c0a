import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Reference for the simple bucket index rule, using only the JDK: the hashing is the JVM's own
 * String.hashCode and List.hashCode, over the UTF-16 strings Java decodes from the input.
 *
 * Usage: java BucketHash HASH_FIELDS N1 [N2 ...] < keys
 * HASH_FIELDS is comma-separated; keys are read one per line (UTF-8). For each key it prints
 * "hash b1 b2 ..." (the List hash, then the bucket for each count), or "LOOP" for a key on which
 * the complex-key walk would never end.
 */
public final class BucketHash {

  private static final class NoEnd extends Exception {
  }

  public static void main(String[] args) throws Exception {
    List<String> fields = new ArrayList<>();
    for (String f : args[0].split(",")) {
      if (!f.isEmpty()) {
        fields.add(f);
      }
    }
    int[] counts = new int[args.length - 1];
    for (int i = 1; i < args.length; i++) {
      counts[i - 1] = Integer.parseInt(args[i]);
    }
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
    String key;
    while ((key = in.readLine()) != null) {
      List<String> values;
      try {
        values = hashValues(key, fields);
      } catch (NoEnd e) {
        out.write("LOOP\n");
        continue;
      }
      int hash = values.hashCode();
      StringBuilder line = new StringBuilder().append(hash);
      for (int n : counts) {
        line.append(' ').append((hash & Integer.MAX_VALUE) % n);
      }
      out.write(line.append('\n').toString());
    }
    out.flush();
  }

  /** The values the bucket hash covers: the key itself, or the hash fields' values of a complex key. */
  static List<String> hashValues(String key, List<String> fields) throws NoEnd {
    if (key.indexOf(',') < 0 || key.indexOf(':') < 0) {
      return Arrays.asList(key);
    }
    List<String> values = new ArrayList<>();
    int at = 0;
    while (at < key.length()) {
      int colon = key.indexOf(':', at);
      boolean wanted = fields.isEmpty() || fields.contains(key.substring(at, colon));
      int next = key.indexOf(':', colon + 1);
      String value;
      if (next < 0) {
        value = key.substring(colon + 1);
        at = key.length();
      } else {
        int comma = key.lastIndexOf(',', next);
        while (comma < colon && (next > 0 || !wanted)) {
          if (next < 0) {
            throw new NoEnd();
          }
          next = key.indexOf(':', next + 1);
          comma = key.lastIndexOf(',', next);
        }
        if (comma > 0) {
          value = key.substring(colon + 1, comma);
          at = comma + 1;
        } else {
          value = key.substring(colon + 1);
          at = key.length();
        }
      }
      if (wanted) {
        values.add(value.equals("__null__") ? null : value.equals("__empty__") ? "" : value);
      }
    }
    return values.isEmpty() ? Arrays.asList(key) : values;
  }
}
