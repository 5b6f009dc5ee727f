package kafkaautoscaler.iceberg;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DataFiles;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.SchemaParser;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.parquet.ParquetUtil;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.spark.sql.SparkSession;

/**
 * Appends Parquet files written outside Spark (by the sink's pyarrow) to an Iceberg table in
 * one snapshot, through the session's catalog: the same table operations as a Spark write,
 * so the same claim check at the commit point ({@link FencedJdbcCatalog}), and the same retry
 * on a concurrent append. Each file's metrics (value and null counts, bounds) are read from
 * its footer, as Iceberg's own file import does; the files carry the table's field ids.
 *
 * <p>Only for tables the sink created as it creates them: partitioned by the identity of its
 * date column alone, Parquet files, no sort order. Others are refused (Spark writes them).
 */
public final class FileAppend {
    private FileAppend() {}

    /** Thrown by {@link #commit} when the table may no longer take such files. */
    public static final class Refused extends IllegalStateException {
        private static final long serialVersionUID = 1L;

        Refused(String message) {
            super(message);
        }
    }

    /**
     * What appending files to {@code identifier} takes, from one load of the table: its
     * {@code refusal} (null if it takes such files) and, when it does, its data
     * {@code location}, Parquet {@code codec} and {@code level} (null: none set) and its
     * {@code schema} as Iceberg's JSON (field ids included).
     */
    public static Map<String, String> layout(
            SparkSession spark, String identifier, String partitionColumn) throws Exception {
        Table table = Spark3Util.loadIcebergTable(spark, identifier);
        Map<String, String> layout = new LinkedHashMap<>();
        String refused = refusal(table, partitionColumn);
        layout.put("refusal", refused);
        if (refused == null) {
            Map<String, String> properties = table.properties();
            layout.put("location", properties.getOrDefault(
                    TableProperties.WRITE_DATA_LOCATION, table.location() + "/data"));
            layout.put("codec", properties.getOrDefault(
                    TableProperties.PARQUET_COMPRESSION,
                    TableProperties.PARQUET_COMPRESSION_DEFAULT));
            layout.put("level", properties.get(TableProperties.PARQUET_COMPRESSION_LEVEL));
            layout.put("schema", SchemaParser.toJson(table.schema()));
        }
        return layout;
    }

    private static String refusal(Table table, String partitionColumn) {
        PartitionSpec spec = table.spec();
        if (spec.fields().size() != 1) {
            return "its partition spec is " + spec;
        }
        PartitionField field = spec.fields().get(0);
        String source = table.schema().findColumnName(field.sourceId());
        if (!field.transform().isIdentity() || !partitionColumn.equals(source)) {
            return "its partition spec is " + spec;
        }
        if (!table.sortOrder().isUnsorted()) {
            return "it has the sort order " + table.sortOrder();
        }
        String format = table.properties().getOrDefault(
                TableProperties.DEFAULT_FILE_FORMAT, TableProperties.DEFAULT_FILE_FORMAT_DEFAULT);
        if (!FileFormat.PARQUET.name().equalsIgnoreCase(format)) {
            return "its file format is " + format;
        }
        return null;
    }

    /**
     * Appends the files (absolute paths, all in the partition {@code partitionPath}, e.g.
     * {@code date=2026-11-26}) in one snapshot whose summary holds {@code summaryValue} under
     * {@link FencedJdbcCatalog#SUMMARY_KEY}; returns the snapshot's id.
     */
    public static long commit(
            SparkSession spark,
            String identifier,
            String partitionColumn,
            String partitionPath,
            String[] paths,
            long[] sizes,
            String summaryValue)
            throws Exception {
        Table table = Spark3Util.loadIcebergTable(spark, identifier);
        table.refresh();
        String refused = refusal(table, partitionColumn);
        if (refused != null) {
            throw new Refused(
                    "cannot append files written outside Spark to " + identifier + ": " + refused);
        }
        MetricsConfig metrics = MetricsConfig.forTable(table);
        AppendFiles append = table.newAppend();
        for (int i = 0; i < paths.length; i++) {
            DataFile file = DataFiles.builder(table.spec())
                    .withPath(paths[i])
                    .withFormat(FileFormat.PARQUET)
                    .withFileSizeInBytes(sizes[i])
                    .withPartitionPath(partitionPath)
                    .withMetrics(ParquetUtil.fileMetrics(table.io().newInputFile(paths[i]), metrics))
                    .build();
            append.appendFile(file);
        }
        append.set(FencedJdbcCatalog.SUMMARY_KEY, summaryValue);
        append.commit();
        return table.currentSnapshot().snapshotId();
    }
}
