import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

/**
 * Takes the lock Hudi's ZooKeeper lock provider takes (a Curator InterProcessMutex on one znode),
 * driven line by line for the interop tests.
 *
 * Usage: CuratorMutex CONNECT LOCK_PATH TIMEOUT_MS
 * Prints "ACQUIRED" or "TIMEOUT"; once acquired, releases after reading one line of stdin and
 * prints "RELEASED".
 */
public final class CuratorMutex {
  public static void main(String[] args) throws Exception {
    CuratorFramework client = CuratorFrameworkFactory.builder()
        .connectString(args[0]).sessionTimeoutMs(10000).connectionTimeoutMs(5000)
        .retryPolicy(new RetryNTimes(3, 100)).build();
    client.start();
    client.blockUntilConnected(10, TimeUnit.SECONDS);
    InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
    System.out.println("CONNECTED");
    System.out.flush();
    boolean got = mutex.acquire(Long.parseLong(args[2]), TimeUnit.MILLISECONDS);
    System.out.println(got ? "ACQUIRED" : "TIMEOUT");
    System.out.flush();
    if (got) {
      new BufferedReader(new InputStreamReader(System.in)).readLine();
      mutex.release();
      System.out.println("RELEASED");
      System.out.flush();
    }
    client.close();
  }
}
