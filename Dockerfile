# Build stage: compile the relay (src/ and migrations/) and nothing else. The developer tools in
# scripts/ and bench/, which tsconfig.json also compiles, are not copied, so they are neither built
# nor shipped.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# `npm ci` runs the `prepare` script (scripts/build.mjs), which builds nothing before src/ is here.
COPY scripts/build.mjs ./scripts/build.mjs
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
# Its `prepare` script again, which finds no src/ here and builds nothing.
COPY scripts/build.mjs ./scripts/build.mjs
# `--omit=dev` keeps TypeScript, a devDependency, because nostr-tools names it as an optional peer;
# nothing loads it at run time, so it goes (23 MB).
RUN npm ci --omit=dev && npm cache clean --force && rm -rf node_modules/typescript
COPY --from=build /app/dist ./dist
COPY assets ./assets
# Without DATABASE_URL the embedded PostgreSQL keeps its data here; it runs as the `node` user.
RUN mkdir -p /data && chown node:node /data
VOLUME /data
USER node
EXPOSE 8008
CMD ["node", "--max-semi-space-size=64", "--no-allocation-site-pretenuring", "dist/src/main.js"]
