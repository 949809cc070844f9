# Build stage: compile TypeScript.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# `npm ci` runs the `prepare` script (scripts/build.mjs), which builds nothing before src/ is here.
COPY scripts ./scripts
RUN npm ci
COPY tsconfig.json ./
COPY src ./src
COPY migrations ./migrations
RUN npm run build

# Runtime stage: production dependencies and the build only.
FROM node:20-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8008 DATA_DIR=/data
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts/build.mjs ./scripts/build.mjs
RUN npm ci --omit=dev && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY assets ./assets
# Without DATABASE_URL the embedded PostgreSQL keeps its data here; it runs as the `node` user.
RUN mkdir -p /data && chown node:node /data
VOLUME /data
USER node
EXPOSE 8008
CMD ["node", "--max-semi-space-size=64", "dist/src/main.js"]
