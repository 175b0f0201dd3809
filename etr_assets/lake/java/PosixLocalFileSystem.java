package etr.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The local file system of the local profile's warehouse: Hadoop's RawLocalFileSystem, with permissions set through
 * java.nio instead of a `chmod` process. Without Hadoop's native library (pyspark ships none), RawLocalFileSystem
 * starts a `chmod` process for every file and directory it creates, and Iceberg creates several files per commit.
 * Raw: no `.crc` file beside each file (LocalFileSystem's checksums; S3 keeps none either). The sticky, setuid and
 * setgid bits are not set (Hadoop creates files and directories without them).
 */
public class PosixLocalFileSystem extends RawLocalFileSystem {
  // FsPermission's bits, lowest first: others, group, owner (execute, write, read each)
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  @Override
  public String getScheme() {
    return "file"; // RawLocalFileSystem leaves it unimplemented; Spark and Iceberg ask for it
  }

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    Set<PosixFilePermission> granted = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        granted.add(BITS[bit]);
      }
    }
    Files.setPosixFilePermissions(pathToFile(path).toPath(), granted);
  }
}
