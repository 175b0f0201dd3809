package etr.hadoop;

import java.io.IOException;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.iceberg.exceptions.RuntimeIOException;
import org.apache.iceberg.hadoop.HadoopFileIO;

/**
 * The s3 profile's Iceberg FileIO: Hadoop's, but a file on SingleRequestS3AFileSystem is deleted with one request.
 * Iceberg deletes only files (never directories), so the probes S3A's delete makes for directories are not needed.
 * HadoopFileIO's bulk delete calls this for each file.
 */
public class SingleRequestDeleteFileIO extends HadoopFileIO {
  @Override
  public void deleteFile(String location) {
    Path path = new Path(location);
    FileSystem fs;
    try {
      fs = path.getFileSystem(getConf());
      if (fs instanceof SingleRequestS3AFileSystem) {
        ((SingleRequestS3AFileSystem) fs).deleteFileObject(path);
        return;
      }
    } catch (IOException e) {
      throw new RuntimeIOException(e, "Failed to delete file: %s", location);
    }
    super.deleteFile(location);
  }
}
