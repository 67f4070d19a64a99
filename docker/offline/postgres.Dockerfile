# A PostgreSQL image made without a registry, a stand-in for the official postgres image
# docker/compose.yaml names, with the same contract where compose uses it: POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB (and POSTGRES_HOST_AUTH_METHOD) create the database on
# first start, PGDATA=/var/lib/postgresql/data, port 5432 on every address, pg_isready on
# PATH, runs as the postgres user. PostgreSQL 15 is Debian bookworm's (the official image
# compose names is 16; the policy store needs neither). scripts/docker-images.sh builds it:
#   docker build -f docker/offline/postgres.Dockerfile --build-arg BASE_IMAGE=<Debian + postgresql-15> docker/offline
ARG BASE_IMAGE=
FROM ${BASE_IMAGE}
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN rm -rf /var/lib/postgresql/15 /etc/postgresql/15 \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
 && chmod 0755 /usr/local/bin/docker-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data \
    PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres", "-c", "listen_addresses=*"]
