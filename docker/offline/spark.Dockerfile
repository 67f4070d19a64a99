# A Spark Connect server image made without a registry, a stand-in for the official
# apache/spark image docker/compose.yaml names: the same paths (/opt/spark/bin/spark-submit,
# SPARK_HOME=/opt/spark, work dir /opt/spark/work-dir) and user (spark, uid 185), with the
# Spark of the pyspark wheel constraints.txt pins (its jars hold the Connect server) on a
# Debian JRE. scripts/docker-images.sh builds it from the repository root:
#   docker build -f docker/offline/spark.Dockerfile --build-arg BASE_IMAGE=<Debian + JRE + python3> \
#     --build-arg WHEELS=<wheelhouse image> .
ARG BASE_IMAGE=
ARG WHEELS=

FROM scratch AS no-wheels
FROM ${WHEELS:-no-wheels} AS wheels

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/src/constraints.txt
COPY constraints.txt /src/
COPY --from=wheels / /wheels/
RUN if [ -n "$(ls /wheels)" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; fi \
 && python3 -m venv /opt/pyspark \
 && /opt/pyspark/bin/pip install --quiet pyspark \
 && /opt/pyspark/bin/python -m pip uninstall --quiet --yes pip setuptools

FROM ${BASE_IMAGE}
COPY --from=build /opt/pyspark /opt/pyspark
# /opt/spark is the installed pyspark package: its bin/, jars/ (the Connect server among them)
RUN ln -s "$(/opt/pyspark/bin/python -c 'import pyspark, pathlib; print(pathlib.Path(pyspark.__file__).parent)')" /opt/spark \
 && test -x /opt/spark/bin/spark-submit && ls /opt/spark/jars | grep -q '^spark-connect_' \
 && useradd --uid 185 --user-group --home-dir /opt/spark/work-dir --shell /usr/sbin/nologin spark \
 && mkdir -p /opt/spark/work-dir && chown spark:spark /opt/spark/work-dir
# Python UDFs run in the interpreter that has pyspark (the official image's python3 has it too)
ENV SPARK_HOME=/opt/spark PYSPARK_PYTHON=/opt/pyspark/bin/python \
    PATH=/opt/spark/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /opt/spark/work-dir
USER 185
