// A broker metrics reporter that receives KIP-714 client telemetry and writes
// each pushed payload to a file of the folder named by the broker setting
// "telemetry.sink.dir": <n>-<client id>-<terminating>.bin, and the client
// instance id the broker assigned that client in <client id>.instance-id.
// tests/test_telemetry_broker.py compiles it with the machine's javac.
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

public class TelemetrySink implements MetricsReporter, ClientTelemetry, ClientTelemetryReceiver {
    private final AtomicInteger count = new AtomicInteger();
    private Path dir;

    @Override public void configure(Map<String, ?> configs) {
        dir = Paths.get(String.valueOf(configs.get("telemetry.sink.dir")));
    }
    @Override public void init(List<KafkaMetric> metrics) {}
    @Override public void metricChange(KafkaMetric metric) {}
    @Override public void metricRemoval(KafkaMetric metric) {}
    @Override public void close() {}

    @Override public ClientTelemetryReceiver clientReceiver() { return this; }

    @Override public void exportMetrics(AuthorizableRequestContext context, ClientTelemetryPayload payload) {
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String name = count.incrementAndGet() + "-" + context.clientId() + "-"
                + payload.isTerminating() + ".bin";
        try {
            Path tmp = dir.resolve(name + ".tmp");
            Files.write(tmp, bytes);
            Files.move(tmp, dir.resolve(name));
            Path idTmp = dir.resolve(context.clientId() + ".instance-id.tmp");
            Files.write(idTmp, payload.clientInstanceId().toString().getBytes());
            Files.move(idTmp, dir.resolve(context.clientId() + ".instance-id"),
                       java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }
}
