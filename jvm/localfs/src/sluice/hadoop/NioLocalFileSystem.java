/*
 * The local file system of a Spark driver without Hadoop's native library: Hadoop's own, except
 * that it sets a file's permissions through java.nio instead of running `chmod` in a child
 * process. Without libhadoop.so, org.apache.hadoop.fs.RawLocalFileSystem forks `chmod` for every
 * file and folder it creates (a Spark write's data files, their .crc files, commit markers,
 * Hudi's timeline files): about 3 ms of the JVM's CPU each, some 27,000 times in sluice's suite.
 *
 * Same permissions, same errors (an IOException naming the path); the sticky, setuid and setgid
 * bits, which java.nio cannot set, still go through Hadoop's `chmod`.
 * Built at set-up (python -m python_ingest.runtime.localfs build), used by local masters only.
 */
package sluice.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

public class NioLocalFileSystem extends LocalFileSystem {

  public NioLocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system under the checksums: permissions through java.nio. */
  public static class Raw extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
        PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_EXECUTE};

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {  // sticky and friends: only chmod sets them
        super.setPermission(p, permission);
        return;
      }
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (0400 >> i)) != 0) {
          set.add(BITS[i]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), set);
    }
  }
}
