package etr.hadoop;

import java.io.IOException;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;

/**
 * The s3 profile's S3A, which can also delete an object known to be a file in one request. S3A's delete(path, false)
 * first asks what the path is (a HEAD) and afterwards whether its parent still exists (a LIST), so that no directory
 * vanishes: three requests for each file Iceberg deletes (an old metadata.json at every commit, expired and orphan
 * files at maintenance), where Iceberg's own S3FileIO sends one. Everything else is S3A's.
 */
public class SingleRequestS3AFileSystem extends S3AFileSystem {
  /**
   * One DELETE of the object at `path`, through S3A's own call: its retries, and its request counters. Deleting an
   * object that is not there succeeds, as on S3.
   */
  public void deleteFileObject(Path path) throws IOException {
    deleteObject(pathToKey(path));
  }
}
